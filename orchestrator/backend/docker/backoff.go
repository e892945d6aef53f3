package docker

import (
	"context"
	"time"

	cbackoff "github.com/cenkalti/backoff/v5"
)

// backoff is the retry delay of a background loop that keeps failing (the
// Docker event stream, the warm pool's refill): backoff/v5's exponential
// schedule from min, doubling up to max, with a fifth of jitter so that
// loops which failed together (every sandboxd on a host after its engine
// restarted) do not retry in step; reset starts over after a success. A
// lasting outage costs a retry about every max, not a busy loop. The loops
// keep their own shape (log the delay, wait, act), so this wraps the
// schedule rather than using backoff.Retry.
type backoff struct {
	exp  cbackoff.ExponentialBackOff
	next time.Duration
}

func newBackoff(min, max time.Duration) *backoff {
	b := &backoff{exp: cbackoff.ExponentialBackOff{
		InitialInterval: min, RandomizationFactor: 0.2, Multiplier: 2, MaxInterval: max,
	}}
	b.reset()
	return b
}

// delay is how long the next wait lasts, for logs.
func (b *backoff) delay() time.Duration { return b.next }

// wait sleeps for the current delay and moves to the next. It reports
// false, early, when ctx ends.
func (b *backoff) wait(ctx context.Context) bool {
	t := time.NewTimer(b.next)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	b.next = b.exp.NextBackOff()
	return true
}

// reset starts over at min.
func (b *backoff) reset() {
	b.exp.Reset()
	b.next = b.exp.NextBackOff()
}
