package harness

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// Machine describes the machine a run measures, read from the running
// system (Linux's /proc; elsewhere what Go knows): the CPU model and count,
// GOMAXPROCS, memory, kernel, and the filesystem and device holding dir
// (the directory the run writes to). Every results file starts with it, so
// a figure is never read against another machine's description.
func Machine(dir string) string {
	if dir == "" {
		dir = os.TempDir()
	}
	cpu := cpuModel()
	if cpu == "" {
		cpu = runtime.GOARCH
	}
	parts := []string{fmt.Sprintf("%s, %d CPUs (GOMAXPROCS %d)", cpu, runtime.NumCPU(), runtime.GOMAXPROCS(0))}
	if mem := memTotal(); mem > 0 {
		parts = append(parts, fmt.Sprintf("%.1f GiB RAM", float64(mem)/(1<<30)))
	}
	kernel := runtime.GOOS
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = "Linux " + strings.TrimSpace(string(b))
	}
	parts = append(parts, kernel)
	if fs := filesystemOf(dir); fs != "" {
		parts = append(parts, fs)
	}
	parts = append(parts, runtime.Version())
	return strings.Join(parts, "; ")
}

// cpuModel is /proc/cpuinfo's model name, marked virtual when the CPU
// flags say a hypervisor runs it.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	var model string
	virtual := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			if model == "" {
				model = strings.TrimSpace(v)
			}
		case "flags":
			if strings.Contains(" "+v+" ", " hypervisor ") {
				virtual = true
			}
		}
	}
	if virtual && model != "" {
		model += " (virtual)"
	}
	return model
}

// memTotal is /proc/meminfo's MemTotal in bytes (0 if unknown).
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// filesystemOf names the filesystem holding dir from /proc/self/mountinfo:
// its type, device and mount options, at the longest mount point above dir.
func filesystemOf(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	best, desc := -1, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 6 || len(b) < 2 {
			continue
		}
		mp := unescapeMount(a[4])
		if !(abs == mp || strings.HasPrefix(abs, strings.TrimSuffix(mp, "/")+"/")) || len(mp) <= best {
			continue
		}
		best = len(mp)
		opts := a[5]
		if len(b) >= 3 {
			opts += "," + b[2]
		}
		desc = fmt.Sprintf("%s on %s%s at %s (%s)", b[0], b[1], rotational(b[1]), mp, shortOptions(opts))
	}
	return desc
}

// rotational says what the kernel reports of a block device's kind.
func rotational(dev string) string {
	name := filepath.Base(dev)
	b, err := os.ReadFile(filepath.Join("/sys/block", name, "queue/rotational"))
	if err != nil {
		return ""
	}
	if strings.TrimSpace(string(b)) == "1" {
		return " (reported rotational)"
	}
	return " (reported non-rotational)"
}

// shortOptions keeps the mount options that bear on write and sync costs.
func shortOptions(opts string) string {
	var keep []string
	seen := map[string]bool{}
	for _, o := range strings.Split(opts, ",") {
		name, _, _ := strings.Cut(o, "=")
		switch name {
		case "rw", "ro", "relatime", "noatime", "discard", "nodiscard", "sync", "barrier", "nobarrier", "data", "commit", "journal_async_commit":
			if !seen[o] {
				seen[o] = true
				keep = append(keep, o)
			}
		}
	}
	return strings.Join(keep, ",")
}

// unescapeMount undoes mountinfo's octal escapes (a space is \040).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
