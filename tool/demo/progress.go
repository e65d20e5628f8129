package demo

import (
	"sync"
	"time"
)

// Progress is where the demo draws what it is doing while it runs: a
// status line that Update replaces and Done clears (the command line draws
// it on stderr when that is a terminal).
type Progress interface {
	Update(format string, args ...any)
	Done()
}

// updateProgress and endProgress draw on p, which may be nil.
func updateProgress(p Progress, format string, args ...any) {
	if p != nil {
		p.Update(format, args...)
	}
}

func endProgress(p Progress) {
	if p != nil {
		p.Done()
	}
}

// phaseProgress draws which phase of the demo runs and for how long, once
// it has run for more than a second: a 500-anchor demo spends 80 s in its
// checks, which would otherwise pass without a word.
type phaseProgress struct {
	prog Progress

	mu    sync.Mutex
	name  string // "" between phases
	start time.Time
	drawn bool

	stop chan struct{}
	done chan struct{}
}

// phaseQuiet is how long a phase runs before it is drawn.
const phaseQuiet = time.Second

// newPhaseProgress starts drawing on prog (nothing when prog is nil).
func newPhaseProgress(prog Progress) *phaseProgress {
	p := &phaseProgress{prog: prog, stop: make(chan struct{}), done: make(chan struct{})}
	if prog == nil {
		close(p.done)
		return p
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				p.tick(now)
			case <-p.stop:
				return
			}
		}
	}()
	return p
}

// step marks the start of a phase; the function it returns ends it.
func (p *phaseProgress) step(name string) func() {
	p.mu.Lock()
	p.name, p.start = name, time.Now()
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.name == name {
			p.name = ""
			if p.drawn {
				p.prog.Done()
				p.drawn = false
			}
		}
	}
}

// tick draws the running phase if it has run longer than phaseQuiet.
func (p *phaseProgress) tick(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.name == "" || now.Sub(p.start) <= phaseQuiet {
		return
	}
	p.prog.Update("demo: %s… %s", p.name, now.Sub(p.start).Truncate(time.Second))
	p.drawn = true
}

// close stops drawing and clears the line.
func (p *phaseProgress) close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
	p.mu.Lock()
	if p.drawn {
		p.prog.Done()
		p.drawn = false
	}
	p.mu.Unlock()
}
