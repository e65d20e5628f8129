package admission

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"pgregory.net/rapid"
)

// tokenModel is the token bucket of one anchor as docs/CONTRACT.md §8 and
// DESIGN.md describe it: rate tokens a second up to burst; a clock that steps back
// counts as no time passing (the bucket refills again from the new time).
type tokenModel struct {
	tokens float64
	at     time.Time
}

// admissionModel is what admission must hold: the costs admitted and not
// released, and each anchor's bucket.
type admissionModel struct {
	maxRecs, perAnchor int
	maxBytes           int64
	rate, burst        float64
	admitted           map[int]*Cost // by ticket
	buckets            map[string]*tokenModel
}

func (m *admissionModel) refill(id string, now time.Time) *tokenModel {
	b := m.buckets[id]
	if b == nil {
		b = &tokenModel{tokens: m.burst, at: now}
		m.buckets[id] = b
	}
	if now.Before(b.at) {
		b.at = now
	}
	b.tokens = min(m.burst, b.tokens+now.Sub(b.at).Seconds()*m.rate)
	b.at = now
	return b
}

func (m *admissionModel) inFlight() (recs int, bytes int64, per map[string]int) {
	per = map[string]int{}
	for _, c := range m.admitted {
		recs += c.Records
		bytes += c.Bytes
		for id, n := range c.Anchors {
			per[id] += n
		}
	}
	return recs, bytes, per
}

// rateOK is whether the rate limit lets c through now.
func (m *admissionModel) rateOK(c *Cost, now time.Time) bool {
	if m.rate <= 0 {
		return true
	}
	for id, n := range c.Anchors {
		b := m.refill(id, now)
		if b.tokens < float64(n) && !(float64(n) > m.burst && b.tokens >= m.burst) {
			return false
		}
	}
	return true
}

// fits reports whether c fits, and when only the per-anchor bound is in
// the way, the byte-smallest anchor at it.
func (m *admissionModel) fits(c *Cost) (bool, string) {
	recs, bytes, per := m.inFlight()
	if recs > 0 && (recs+c.Records > m.maxRecs || bytes+c.Bytes > m.maxBytes) {
		return false, ""
	}
	var blocked []string
	for id, n := range c.Anchors {
		if have := per[id]; m.perAnchor > 0 && have > 0 && have+n > m.perAnchor {
			blocked = append(blocked, id)
		}
	}
	if len(blocked) == 0 {
		return true, ""
	}
	slices.Sort(blocked)
	return false, blocked[0]
}

func (m *admissionModel) take(c *Cost) {
	if m.rate <= 0 {
		return
	}
	for id, n := range c.Anchors {
		m.buckets[id].tokens -= float64(n)
	}
}

func (m *admissionModel) give(c *Cost) {
	if m.rate <= 0 {
		return
	}
	for id, n := range c.Anchors {
		if b := m.buckets[id]; b != nil {
			b.tokens = min(m.burst, b.tokens+float64(n))
		}
	}
}

// TestAdmissionTokenAccountingModel checks admission's accounting against
// the model above over random sequences of requests (refused at once or
// with an ended context), releases, failed appends that give their tokens
// back, and a clock that moves both ways:
//
//   - records, bytes and per-anchor records in flight are exactly the sum of
//     what is admitted and not released, and nothing is left at the end;
//   - a request is refused with CAP_003 exactly when its anchor lacks
//     tokens, with CAP_002 (or CAP_001, waiting with an ended context)
//     exactly when it does not fit, and a refusal takes no tokens and no room;
//   - every refusal names the code's reason and carries the capacity state;
//     a per-anchor refusal names its anchor;
//   - each anchor's tokens match the model, never above the burst;
//   - waiting a CAP_003's RetryAfter is enough for the same request.
func TestAdmissionTokenAccountingModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		clock := time.Unix(1_800_000_000, 0)
		rate := rapid.SampledFrom([]float64{0, 1e-12, 0.5, 1, 2.5, 3, 7, 1000}).Draw(rt, "rate")
		burst := rapid.IntRange(0, 5).Draw(rt, "burst")
		o := Config{
			MaxRecords: rapid.IntRange(1, 8).Draw(rt, "maxRecs"),
			MaxBytes:   int64(rapid.IntRange(1, 2000).Draw(rt, "maxBytes")),
			PerAnchor:  rapid.IntRange(0, 4).Draw(rt, "perAnchor"),
			Rate:       rate,
			Burst:      burst,
			Clock:      func() time.Time { return clock },
		}
		a := New(o)
		m := &admissionModel{maxRecs: o.MaxRecords, maxBytes: o.MaxBytes, perAnchor: o.PerAnchor,
			rate: a.rate, burst: a.burst, admitted: map[int]*Cost{}, buckets: map[string]*tokenModel{}}
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		anchors := []string{"a", "b", "c"}
		ticket := 0

		try := func(c *Cost, refuse bool) {
			ctx := ended
			if refuse {
				ctx = context.Background()
			}
			wantRate := m.rateOK(c, clock)
			wantFit, wantAnchor := m.fits(c)
			snap := *c
			err := a.Acquire(ctx, c, refuse)
			var re *errs.RefusalError
			switch {
			case !wantRate:
				if !errors.As(err, &re) || re.Code != errs.CodeRateLimited {
					rt.Fatalf("%+v without tokens: %v, want CAP_003", snap, err)
				}
				if re.RetryAfter <= 0 {
					rt.Fatalf("CAP_003 with RetryAfter %v", re.RetryAfter)
				}
			case !wantFit:
				want := errs.CodeQueueFull
				if !refuse {
					want = errs.CodeCapacityExhausted
				}
				if !errors.As(err, &re) || re.Code != want || re.Anchor != wantAnchor {
					rt.Fatalf("%+v past the bounds: %v (anchor %q), want %s naming anchor %q", snap, err, re.Anchor, want, wantAnchor)
				}
				m.take(c)
				m.give(c) // taken, then given back: the cap at burst applies
			default:
				if err != nil {
					rt.Fatalf("%+v fits and has tokens: %v", snap, err)
				}
				m.take(c)
				ticket++
				m.admitted[ticket] = c
			}
			if re != nil {
				if re.Reason != re.Code.Reason() {
					rt.Fatalf("refusal %s with reason %q", re.Code, re.Reason)
				}
				if re.MaxRecords != o.MaxRecords || re.MaxBytes != o.MaxBytes {
					rt.Fatalf("refusal without the capacity state: %#v", re)
				}
				recs, bytes, _ := m.inFlight()
				if re.InFlightRecords != recs || re.InFlightBytes != bytes {
					rt.Fatalf("refusal reports %d records, %d bytes in flight; %d, %d are", re.InFlightRecords, re.InFlightBytes, recs, bytes)
				}
			}
			// Waiting the hint is enough, unless the hint is the longest
			// Duration (a wait too long for one).
			if re != nil && re.Code == errs.CodeRateLimited && re.RetryAfter < math.MaxInt64 && rapid.Bool().Draw(rt, "waitHint") {
				clock = clock.Add(re.RetryAfter)
				if !m.rateOK(c, clock) {
					rt.Fatalf("the model still refuses %+v after its RetryAfter %v", snap, re.RetryAfter)
				}
				if err := a.Acquire(context.Background(), c, true); errors.As(err, &re) && re.Code == errs.CodeRateLimited {
					rt.Fatalf("%+v refused again after waiting its RetryAfter: %v", snap, err)
				} else if err == nil {
					m.take(c)
					ticket++
					m.admitted[ticket] = c
				} else {
					m.take(c)
					m.give(c)
				}
			}
		}

		steps := rapid.IntRange(1, 80).Draw(rt, "steps")
		for range steps {
			switch rapid.IntRange(0, 6).Draw(rt, "op") {
			case 0, 1, 2: // a request
				c := &Cost{Anchors: map[string]int{}}
				for range rapid.IntRange(1, 3).Draw(rt, "anchorsInRequest") {
					id := rapid.SampledFrom(anchors).Draw(rt, "anchor")
					n := rapid.IntRange(1, 7).Draw(rt, "records")
					c.Anchors[id] += n
					c.Records += n
				}
				c.Bytes = int64(c.Records) * int64(rapid.IntRange(1, 300).Draw(rt, "bytesPerRecord"))
				try(c, rapid.Bool().Draw(rt, "refuse"))
			case 3: // an admitted append is acknowledged
				if k, c := pick(rt, m.admitted); c != nil {
					a.Release(c)
					delete(m.admitted, k)
				}
			case 4: // an admitted append fails: tokens back, then released
				if k, c := pick(rt, m.admitted); c != nil {
					a.ReturnTokens(c.Anchors)
					m.give(c)
					a.Release(c)
					delete(m.admitted, k)
				}
			case 5: // time passes
				clock = clock.Add(time.Duration(rapid.Int64Range(0, int64(3*time.Second)).Draw(rt, "forward")))
			case 6: // the clock steps back
				clock = clock.Add(-time.Duration(rapid.Int64Range(1, int64(time.Hour)).Draw(rt, "back")))
			}
			recs, bytes, per := m.inFlight()
			if r, b := a.InFlight(); r != recs || b != bytes {
				rt.Fatalf("in flight %d records, %d bytes; the model has %d, %d", r, b, recs, bytes)
			}
			a.mu.Lock()
			for id, n := range a.anchorRecs {
				if n <= 0 || per[id] != n {
					rt.Fatalf("anchor %s: %d records in flight, the model has %d", id, n, per[id])
				}
			}
			if len(a.anchorRecs) != len(per) {
				rt.Fatalf("%d anchors in flight, the model has %d", len(a.anchorRecs), len(per))
			}
			a.mu.Unlock()
			if rate > 0 {
				for _, id := range anchors {
					got, want := a.Tokens(id), m.refill(id, clock).tokens
					if math.Abs(got-want) > 1e-6 || got > a.burst {
						rt.Fatalf("anchor %s: %.9f tokens, the model has %.9f (burst %g)", id, got, want, a.burst)
					}
				}
			}
		}
		for k, c := range m.admitted {
			a.Release(c)
			delete(m.admitted, k)
		}
		if r, b := a.InFlight(); r != 0 || b != 0 || len(a.anchorRecs) != 0 || a.waiters != 0 {
			rt.Fatalf("after every release: %d records, %d bytes, %d anchors, %d waiters", r, b, len(a.anchorRecs), a.waiters)
		}
		if n := a.gate.Inside(); n != 0 {
			rt.Fatalf("the close gate holds %d calls after every release", n)
		}
	})
}

// pick draws one admitted cost, or nil when there is none.
func pick(rt *rapid.T, admitted map[int]*Cost) (int, *Cost) {
	if len(admitted) == 0 {
		return 0, nil
	}
	keys := make([]int, 0, len(admitted))
	for k := range admitted {
		keys = append(keys, k)
	}
	slices.Sort(keys) // map order is random; sorted, rapid can replay
	k := rapid.SampledFrom(keys).Draw(rt, "admitted")
	return k, admitted[k]
}
