package proof

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/jsonobj"
	"github.com/anchordb/anchordb/segment"
)

// Kind names a proof type in the "kind" field of its JSON.
type Kind string

// The proof kinds.
const (
	KindInclusion   Kind = "inclusion"          // a record in its anchor tree
	KindConsistency Kind = "consistency"        // an anchor tree between two sizes
	KindFrontier    Kind = "frontier_inclusion" // an anchor's entry in a frontier root
)

// InclusionProof proves that the record with hash Leaf is at Seq in Anchor's
// tree of Size leaves with root Root (CONTRACT §10). Its JSON is
//
//	{"anchor":"a","seq":7,"size":100,"leaf":"blake3:…","root":"blake3:…","proof":["blake3:…",…],"kind":"inclusion"}
//
// Leaf is the record hash, the Merkle leaf data: verifiers apply HashLeaf.
// Proof lists the sibling hashes from the leaf upward (RFC 9162 §2.1.3).
type InclusionProof struct {
	Anchor string
	Seq    uint64 // 1-based; leaf index Seq-1
	Size   uint64
	Leaf   segment.Hash
	Root   segment.Hash
	Proof  []segment.Hash
}

// ConsistencyProof proves that Anchor's tree of OldSize leaves (root OldRoot)
// is a prefix of its tree of NewSize leaves (root NewRoot) (CONTRACT §10):
//
//	{"anchor":"a","old_size":50,"new_size":100,"old_root":"blake3:…","new_root":"blake3:…","proof":[…],"kind":"consistency"}
type ConsistencyProof struct {
	Anchor  string
	OldSize uint64
	NewSize uint64
	OldRoot segment.Hash
	NewRoot segment.Hash
	Proof   []segment.Hash
}

// FrontierProof proves that the entry (Anchor, Size, AnchorRoot) is leaf
// Index of the frontier tree of Anchors leaves with root Root — the "root"
// line of a checkpoint (CONTRACT §5). Origin, when set, names the checkpoint's
// origin line; it is informational and not covered by the proof:
//
//	{"anchor":"a","size":100,"anchor_root":"blake3:…","index":0,"anchors":3,"root":"blake3:…","proof":[…],"origin":"anchordb/…/blake3","kind":"frontier_inclusion"}
type FrontierProof struct {
	Origin     string
	Anchor     string
	Size       uint64
	AnchorRoot segment.Hash
	Index      uint64
	Anchors    uint64
	Root       segment.Hash
	Proof      []segment.Hash
}

// The JSON forms. Field order is the CONTRACT §10 order with "kind" last.
type (
	inclusionJSON struct {
		Anchor string         `json:"anchor"`
		Seq    uint64         `json:"seq"`
		Size   uint64         `json:"size"`
		Leaf   segment.Hash   `json:"leaf"`
		Root   segment.Hash   `json:"root"`
		Proof  []segment.Hash `json:"proof"`
		Kind   Kind           `json:"kind"`
	}
	consistencyJSON struct {
		Anchor  string         `json:"anchor"`
		OldSize uint64         `json:"old_size"`
		NewSize uint64         `json:"new_size"`
		OldRoot segment.Hash   `json:"old_root"`
		NewRoot segment.Hash   `json:"new_root"`
		Proof   []segment.Hash `json:"proof"`
		Kind    Kind           `json:"kind"`
	}
	frontierJSON struct {
		Anchor     string         `json:"anchor"`
		Size       uint64         `json:"size"`
		AnchorRoot segment.Hash   `json:"anchor_root"`
		Index      uint64         `json:"index"`
		Anchors    uint64         `json:"anchors"`
		Root       segment.Hash   `json:"root"`
		Proof      []segment.Hash `json:"proof"`
		Origin     string         `json:"origin,omitempty"`
		Kind       Kind           `json:"kind"`
	}
)

// Decoding forms: pointers tell a missing field from a zero one.
type (
	inclusionWire struct {
		Anchor *string         `json:"anchor"`
		Seq    *uint64         `json:"seq"`
		Size   *uint64         `json:"size"`
		Leaf   *segment.Hash   `json:"leaf"`
		Root   *segment.Hash   `json:"root"`
		Proof  *[]segment.Hash `json:"proof"`
		Kind   *Kind           `json:"kind"`
	}
	consistencyWire struct {
		Anchor  *string         `json:"anchor"`
		OldSize *uint64         `json:"old_size"`
		NewSize *uint64         `json:"new_size"`
		OldRoot *segment.Hash   `json:"old_root"`
		NewRoot *segment.Hash   `json:"new_root"`
		Proof   *[]segment.Hash `json:"proof"`
		Kind    *Kind           `json:"kind"`
	}
	frontierWire struct {
		Anchor     *string         `json:"anchor"`
		Size       *uint64         `json:"size"`
		AnchorRoot *segment.Hash   `json:"anchor_root"`
		Index      *uint64         `json:"index"`
		Anchors    *uint64         `json:"anchors"`
		Root       *segment.Hash   `json:"root"`
		Proof      *[]segment.Hash `json:"proof"`
		Origin     *string         `json:"origin"`
		Kind       *Kind           `json:"kind"`
	}
)

// MarshalJSON encodes the proof in its CONTRACT §10 shape plus "kind". An empty
// proof prints as [].
func (p InclusionProof) MarshalJSON() ([]byte, error) {
	return marshal(inclusionJSON{p.Anchor, p.Seq, p.Size, p.Leaf, p.Root, nonNil(p.Proof), KindInclusion})
}

// UnmarshalJSON decodes the CONTRACT §10 shape. Every field it names is required,
// "kind" is optional but must say "inclusion", and unknown fields, trailing
// data or a malformed hash are INPUT_001. It does not verify the proof.
func (p *InclusionProof) UnmarshalJSON(data []byte) error {
	var w inclusionWire
	if err := decodeStrict(data, &w); err != nil {
		return fmt.Errorf("inclusion proof: %w", err)
	}
	if err := checkKind(w.Kind, KindInclusion); err != nil {
		return err
	}
	if err := required(KindInclusion,
		field{"anchor", w.Anchor == nil}, field{"seq", w.Seq == nil}, field{"size", w.Size == nil},
		field{"leaf", w.Leaf == nil}, field{"root", w.Root == nil}, field{"proof", w.Proof == nil},
	); err != nil {
		return err
	}
	*p = InclusionProof{*w.Anchor, *w.Seq, *w.Size, *w.Leaf, *w.Root, *w.Proof}
	return nil
}

// MarshalJSON encodes the proof in its CONTRACT §10 shape plus "kind". An empty
// proof prints as [].
func (p ConsistencyProof) MarshalJSON() ([]byte, error) {
	return marshal(consistencyJSON{p.Anchor, p.OldSize, p.NewSize, p.OldRoot, p.NewRoot, nonNil(p.Proof), KindConsistency})
}

// UnmarshalJSON decodes the CONTRACT §10 shape, with the rules of
// InclusionProof.UnmarshalJSON ("kind", if present, must say "consistency").
func (p *ConsistencyProof) UnmarshalJSON(data []byte) error {
	var w consistencyWire
	if err := decodeStrict(data, &w); err != nil {
		return fmt.Errorf("consistency proof: %w", err)
	}
	if err := checkKind(w.Kind, KindConsistency); err != nil {
		return err
	}
	if err := required(KindConsistency,
		field{"anchor", w.Anchor == nil}, field{"old_size", w.OldSize == nil}, field{"new_size", w.NewSize == nil},
		field{"old_root", w.OldRoot == nil}, field{"new_root", w.NewRoot == nil}, field{"proof", w.Proof == nil},
	); err != nil {
		return err
	}
	*p = ConsistencyProof{*w.Anchor, *w.OldSize, *w.NewSize, *w.OldRoot, *w.NewRoot, *w.Proof}
	return nil
}

// MarshalJSON encodes the proof as documented on FrontierProof; "origin" is
// omitted when empty.
func (p FrontierProof) MarshalJSON() ([]byte, error) {
	return marshal(frontierJSON{p.Anchor, p.Size, p.AnchorRoot, p.Index, p.Anchors, p.Root, nonNil(p.Proof), p.Origin, KindFrontier})
}

// UnmarshalJSON decodes the FrontierProof shape. Every field but "origin"
// and "kind" is required; "kind", if present, must say "frontier_inclusion";
// unknown fields, trailing data or a malformed hash are INPUT_001.
func (p *FrontierProof) UnmarshalJSON(data []byte) error {
	var w frontierWire
	if err := decodeStrict(data, &w); err != nil {
		return fmt.Errorf("frontier proof: %w", err)
	}
	if err := checkKind(w.Kind, KindFrontier); err != nil {
		return err
	}
	if err := required(KindFrontier,
		field{"anchor", w.Anchor == nil}, field{"size", w.Size == nil}, field{"anchor_root", w.AnchorRoot == nil},
		field{"index", w.Index == nil}, field{"anchors", w.Anchors == nil}, field{"root", w.Root == nil},
		field{"proof", w.Proof == nil},
	); err != nil {
		return err
	}
	*p = FrontierProof{Anchor: *w.Anchor, Size: *w.Size, AnchorRoot: *w.AnchorRoot, Index: *w.Index,
		Anchors: *w.Anchors, Root: *w.Root, Proof: *w.Proof}
	if w.Origin != nil {
		p.Origin = *w.Origin
	}
	return nil
}

// Verified describes a proof that VerifyJSON accepted. Exactly the field of
// its Kind is set.
type Verified struct {
	Kind        Kind
	Inclusion   *InclusionProof
	Consistency *ConsistencyProof
	Frontier    *FrontierProof
}

// String is a one-line human description of what was proved.
func (v Verified) String() string {
	switch {
	case v.Inclusion != nil:
		p := v.Inclusion
		return fmt.Sprintf("inclusion: anchor %q seq %d (record %s) is in its tree of size %d with root %s", p.Anchor, p.Seq, p.Leaf, p.Size, p.Root)
	case v.Consistency != nil:
		p := v.Consistency
		return fmt.Sprintf("consistency: anchor %q tree of size %d (root %s) is a prefix of size %d (root %s)", p.Anchor, p.OldSize, p.OldRoot, p.NewSize, p.NewRoot)
	case v.Frontier != nil:
		p := v.Frontier
		return fmt.Sprintf("frontier inclusion: anchor %q size %d root %s is entry %d of %d under frontier root %s", p.Anchor, p.Size, p.AnchorRoot, p.Index, p.Anchors, p.Root)
	}
	return "no proof"
}

// VerifyJSON decodes one proof of any kind and verifies it offline against
// the root it carries, with merkle/proof and the BLAKE3 hasher. The kind
// comes from the "kind" field, or, when absent (a bare CONTRACT §10 object), from
// the fields present: "old_size"/"new_size" → consistency, "seq"/"leaf" →
// inclusion, "anchor_root" → frontier inclusion.
//
// Malformed JSON or an unknown kind is INPUT_001; a proof that does not
// verify is INT_001 (see VerifyInclusionProof). The caller must still check
// that the anchor, tree size and root are ones it trusts (e.g. from a signed
// checkpoint): as with any RFC 6962 proof, the size is not bound by the
// proof alone (the same path can verify for neighbouring sizes).
func VerifyJSON(data []byte) (Verified, error) {
	kind, err := detectKind(data)
	if err != nil {
		return Verified{}, err
	}
	v := Verified{Kind: kind}
	switch kind {
	case KindInclusion:
		v.Inclusion = new(InclusionProof)
		if err := json.Unmarshal(data, v.Inclusion); err != nil {
			return Verified{}, asInput(err)
		}
		err = VerifyInclusionProof(v.Inclusion)
	case KindConsistency:
		v.Consistency = new(ConsistencyProof)
		if err := json.Unmarshal(data, v.Consistency); err != nil {
			return Verified{}, asInput(err)
		}
		err = VerifyConsistencyProof(v.Consistency)
	case KindFrontier:
		v.Frontier = new(FrontierProof)
		if err := json.Unmarshal(data, v.Frontier); err != nil {
			return Verified{}, asInput(err)
		}
		err = VerifyFrontierProof(v.Frontier)
	}
	if err != nil {
		return Verified{}, err
	}
	return v, nil
}

// detectKind finds the proof kind of a JSON object.
func detectKind(data []byte) (Kind, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
		if err == nil {
			err = errors.New("null")
		}
		return "", errs.Wrap(errs.CodeInvalidInput, err, "proof is not a JSON object")
	}
	if raw, ok := fields["kind"]; ok {
		var k Kind
		if err := json.Unmarshal(raw, &k); err != nil {
			return "", errs.Wrap(errs.CodeInvalidInput, err, "proof kind")
		}
		switch k {
		case KindInclusion, KindConsistency, KindFrontier:
			return k, nil
		}
		return "", errs.New(errs.CodeInvalidInput, "unknown proof kind %q (want %q, %q or %q)", k, KindInclusion, KindConsistency, KindFrontier)
	}
	has := func(name string) bool { _, ok := fields[name]; return ok }
	switch {
	case has("old_size") || has("new_size"):
		return KindConsistency, nil
	case has("seq") || has("leaf"):
		return KindInclusion, nil
	case has("anchor_root"):
		return KindFrontier, nil
	}
	return "", errs.New(errs.CodeInvalidInput, "JSON object is not a proof: no kind, seq, old_size or anchor_root field")
}

// marshal encodes v as compact JSON without HTML escaping, so anchor ids
// such as "a<b" print as they are.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// decodeStrict decodes one JSON object into v, a pointer to a struct whose
// fields all have json tags, refusing unknown fields and trailing data.
// Errors are INPUT_001.
//
// A key must be exactly a tag's name, and appear once. encoding/json alone
// matches keys without regard to case and lets the last of two equal keys
// win: a proof could then carry "root" with a root its reader trusts, for
// any tool that reads the file as it is written, and "Root" with the root
// it was made against, for this decoder.
func decodeStrict(data []byte, v any) error {
	if err := checkKeys(data, reflect.TypeOf(v).Elem()); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return asInput(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errs.New(errs.CodeInvalidInput, "trailing data after the JSON object")
	}
	return nil
}

// checkKeys refuses an object with a key that is not exactly the json tag
// name of one of the fields of struct type t, or that appears twice.
func checkKeys(data []byte, t reflect.Type) error {
	names := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names[name] = true
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	err := jsonobj.Fields(dec, func(key string) error {
		if !names[key] {
			return errs.New(errs.CodeInvalidInput, "unknown field %q (field names are exact and lower case)", key)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		// NB: encoding/json leaves a null element of a []segment.Hash as
		// the zero hash; a null field is caught as missing by the caller.
		var elems []json.RawMessage
		if json.Unmarshal(raw, &elems) == nil && slices.ContainsFunc(elems, func(e json.RawMessage) bool { return string(e) == "null" }) {
			return errs.New(errs.CodeInvalidInput, "field %q holds a null", key)
		}
		return nil
	})
	var notObject *jsonobj.NotObjectError
	var dup *jsonobj.DuplicateKeyError
	switch {
	case errors.As(err, &notObject):
		return errs.New(errs.CodeInvalidInput, "want a JSON object, found %s", jsonobj.Describe(notObject.Got))
	case errors.As(err, &dup):
		return errs.New(errs.CodeInvalidInput, "field %q appears twice", dup.Key)
	case err != nil:
		return asInput(err)
	}
	return nil
}

// asInput returns err as an INPUT_001 error unless it already has a code.
func asInput(err error) error {
	if errs.CodeOf(err) != "" {
		return err
	}
	return errs.Wrap(errs.CodeInvalidInput, err, "malformed JSON")
}

func checkKind(got *Kind, want Kind) error {
	if got != nil && *got != want {
		return errs.New(errs.CodeInvalidInput, "proof kind is %q, want %q", *got, want)
	}
	return nil
}

// field is a required JSON field and whether it was missing (or null).
type field struct {
	name    string
	missing bool
}

// required reports the first missing field.
func required(kind Kind, fields ...field) error {
	for _, f := range fields {
		if f.missing {
			return errs.New(errs.CodeInvalidInput, "%s proof: field %q is missing or null", kind, f.name)
		}
	}
	return nil
}

func nonNil(hs []segment.Hash) []segment.Hash {
	if hs == nil {
		return []segment.Hash{}
	}
	return hs
}

// toHashes converts raw proof hashes (each segment.HashSize bytes).
func toHashes(raw [][]byte) []segment.Hash {
	out := make([]segment.Hash, len(raw))
	for i, h := range raw {
		copy(out[i][:], h)
	}
	return out
}

// checkedHashes converts raw proof hashes from a caller, checking their size.
func checkedHashes(raw [][]byte) ([]segment.Hash, error) {
	for i, h := range raw {
		if len(h) != segment.HashSize {
			return nil, errs.New(errs.CodeInvalidInput, "proof hash %d is %d bytes, want %d", i, len(h), segment.HashSize)
		}
	}
	return toHashes(raw), nil
}

// fromHashes converts proof hashes for merkle/proof.
func fromHashes(hs []segment.Hash) [][]byte {
	out := make([][]byte, len(hs))
	for i := range hs {
		out[i] = hs[i][:]
	}
	return out
}
