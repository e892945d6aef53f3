package iolog

import (
	"errors"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// The follow loop, written once for the Docker backend (on the host) and
// the io sidecar of the Kubernetes backend (inside the Pod): each adds
// only what it knows of the sandbox (FollowOptions) and says what
// Follow's errors mean to its own callers.

// Errors of Follow, besides ErrClosed, ErrTampered and those of Drain.
var (
	// ErrPruned: the command's output was pruned by the driver (its events
	// file is gone and the driver is past its record; Events.Pruned).
	ErrPruned = errors.New("command output pruned")
	// ErrDied: the sandbox died (FollowOptions.Dead) before the command's
	// done event; everything its driver wrote was delivered.
	ErrDied = errors.New("sandbox died before the command finished")
	// ErrStopped: the follower's host is shutting down
	// (FollowOptions.Stop).
	ErrStopped = errors.New("stopped following: shutting down")
)

const (
	// PrunedCheckDelay is how long a follower whose command has no events
	// file waits before it reads the driver's state to learn whether the
	// output was pruned. A command that runs soon creates its file well
	// within it.
	PrunedCheckDelay = 50 * time.Millisecond
	// DefaultRecheck is how often a follower re-reads its events file
	// without a notification, in case one was lost.
	DefaultRecheck = time.Second
)

// FollowOptions are what a follower's host adds to Follow. Every field is
// optional (nil channels never fire).
type FollowOptions struct {
	// Recheck is how often Follow re-reads the events file without a
	// notification (DefaultRecheck when zero); the first re-check comes
	// after PrunedCheckDelay, or Recheck if shorter.
	Recheck time.Duration
	// Stop, when closed, ends Follow with ErrStopped: the host is shutting
	// down.
	Stop <-chan struct{}
	// Gone, when closed, ends Follow with ErrClosed: the sandbox was
	// deleted.
	Gone <-chan struct{}
	// Dead, when closed, says the sandbox's driver is gone: Follow reads
	// what it wrote to the end, and ends with ErrDied if that holds no
	// done event.
	Dead <-chan struct{}
	// OnRecheck is called at each re-check (the Docker backend counts a
	// follow as a use of its sandbox, each second).
	OnRecheck func()
}

// Follow calls fn for each of the command's events after the Events'
// afterSeq, in order, as the driver writes them, and returns nil once it
// has delivered the done event (at once, if done's seq is not above
// afterSeq). A command that is queued has no events yet: Follow waits for
// them, woken by w's notifications for the command (subscribed before the
// first read, so no write is missed) and re-checking every o.Recheck in
// case one was lost. Follow returns
//   - ErrPruned if the command's output was pruned (noticed at the first
//     re-check, after PrunedCheckDelay: only the re-checks pay for reading
//     the driver's state, so a command about to start never does);
//   - ErrDied, ErrStopped or ErrClosed as o says, ErrClosed also when the
//     Dir is closed;
//   - an error wrapping ErrTampered if the events file was replaced or
//     altered from inside the sandbox (see Drain);
//   - fn's error as it is, if fn fails;
//   - the Events' context error when it ends.
//
// Errors of the command log are EventsContext's, before Follow.
func (e *Events) Follow(w *Watcher, o FollowOptions, fn func(ioproto.Event) error) error {
	sub := w.Subscribe(e.dir, e.cmd)
	defer sub.Cancel()
	recheck := o.Recheck
	if recheck <= 0 {
		recheck = DefaultRecheck
	}
	tick := time.NewTicker(min(PrunedCheckDelay, recheck))
	defer tick.Stop()
	rechecking := false
	for {
		// Look at the sandbox's state before reading: if it was already
		// dead, everything its driver wrote is in the file, and a read that
		// finds no done means there will never be one.
		dead := false
		select {
		case <-o.Dead:
			dead = true
		default:
		}
		done, err := e.Drain(fn)
		if err != nil || done {
			return err
		}
		if dead {
			return ErrDied
		}
		// A missing events file means that the command has not started yet
		// or that its output was pruned; only the re-checks tell them apart.
		if rechecking && e.Pruned() {
			return ErrPruned
		}
		rechecking = false
		select {
		case <-e.ctx.Done():
			return e.ctx.Err()
		case <-o.Stop:
			return ErrStopped
		case <-o.Gone:
			return ErrClosed
		case <-sub.C:
		case <-o.Dead:
		case <-tick.C:
			tick.Reset(recheck)
			rechecking = true
			if o.OnRecheck != nil {
				o.OnRecheck()
			}
		}
	}
}
