package docker

import (
	"context"
	"time"
)

// backoff is the retry delay of a background loop that keeps failing (the
// Docker event stream, the warm pool's refill): it starts at min, doubles
// after each wait up to max, and starts over with reset after a success,
// so a lasting outage costs a retry every max, not a busy loop.
type backoff struct {
	min, max, next time.Duration
}

func newBackoff(min, max time.Duration) *backoff {
	return &backoff{min: min, max: max, next: min}
}

// delay is how long the next wait lasts, for logs.
func (b *backoff) delay() time.Duration { return b.next }

// wait sleeps for the current delay and doubles it. It reports false,
// early, when ctx ends.
func (b *backoff) wait(ctx context.Context) bool {
	t := time.NewTimer(b.next)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	b.next = min(2*b.next, b.max)
	return true
}

// reset starts over at min.
func (b *backoff) reset() { b.next = b.min }
