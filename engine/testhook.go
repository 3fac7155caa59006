package engine

// StepGate holds an engine's loop between steps until a test lets it go on. Tests that must
// order their requests against the engine's steps (submit every request before the first step,
// abort a request at a chosen point of its generation, look at the engine while a request is
// still running) use it instead of racing the loop or sleeping. It exists for tests, of this
// package and of the servers built on it: production code never creates one, and an engine
// without a gate pays one nil check per loop iteration.
//
// While the loop waits at the gate it still applies every command (Generate, Abort, Stats, the
// host calls), so a test can submit, cancel and inspect work between two steps of its choice.
type StepGate struct {
	e *Engine
	// Owned by the loop goroutine.
	steps   int          // steps the loop may run before it waits again
	open    bool         // Open was called: the loop no longer waits
	waiters []statWaiter // Wait calls whose condition did not hold yet
}

type statWaiter struct {
	cond func(Stats) bool
	done chan struct{}
}

// HoldSteps installs a closed StepGate (tests only), in place of any earlier one: the loop runs
// no further step until Step or Open lets it. It returns nil when the engine is closed.
func (e *Engine) HoldSteps() *StepGate {
	g := &StepGate{e: e}
	if !e.call(func() { e.gate = g }) {
		return nil
	}
	return g
}

// Step lets the loop run one step and returns once the step's outputs are in their streams. It
// reports false, having run nothing, when the engine has nothing to run or is closed.
func (g *StepGate) Step() bool {
	ran := false
	if !g.e.call(func() {
		if g.e.gate == g && !g.open && g.e.sched.HasWork() {
			g.steps++
			ran = true
		}
	}) || !ran {
		return false
	}
	// The loop applies commands only between steps, so this one runs after the step.
	return g.e.call(func() {})
}

// Wait blocks until cond holds for the engine's stats. cond runs on the loop goroutine after
// every command and every step, before and after Open, so Wait sees each state the engine
// passes through, without polling; it returns false when the engine closes first.
func (g *StepGate) Wait(cond func(Stats) bool) bool {
	w := statWaiter{cond: cond, done: make(chan struct{})}
	if !g.e.call(func() { g.waiters = append(g.waiters, w); g.notify() }) {
		return false
	}
	select {
	case <-w.done:
		return true
	case <-g.e.stopped:
		return false
	}
}

// Open lets the loop step freely again; Wait goes on working.
func (g *StepGate) Open() { g.e.call(func() { g.open = true }) }

// stepped is called by the loop after each step: the step changed the stats.
func (g *StepGate) stepped() {
	if g != nil {
		g.notify()
	}
}

// notify ends the Wait calls whose condition now holds; on the loop goroutine.
func (g *StepGate) notify() {
	if len(g.waiters) == 0 {
		return
	}
	g.e.snapshot()
	g.e.statsMu.Lock()
	st := g.e.stats
	g.e.statsMu.Unlock()
	kept := g.waiters[:0]
	for _, w := range g.waiters {
		if w.cond(st) {
			close(w.done)
		} else {
			kept = append(kept, w)
		}
	}
	g.waiters = kept
}

// passGate is called by the loop before it would step: with a gate and no step allowed, it
// applies commands until a step is allowed or the work is gone. It returns false when the
// engine is stopping, so that no step runs. Without a gate it is an inlined nil check.
func (e *Engine) passGate() bool { return e.gate == nil || e.gate.pass() }

func (g *StepGate) pass() bool {
	e := g.e
	g.notify()
	for !g.open && g.steps == 0 && e.sched.HasWork() {
		select {
		case fn := <-e.cmds:
			fn()
			g.notify()
		case <-e.stop:
			return false
		}
	}
	switch {
	case !e.sched.HasWork():
		g.steps = 0 // a step allowed for work aborted meanwhile is not kept for later work
	case g.steps > 0:
		g.steps--
	}
	return true
}
