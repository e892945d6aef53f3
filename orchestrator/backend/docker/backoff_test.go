package docker

import (
	"context"
	"testing"
	"time"
)

// TestBackoffSchedule: the delays grow from about min to about max and no
// further (a fifth of jitter either way), reset starts over, and a wait
// ends early, false, when its context does.
func TestBackoffSchedule(t *testing.T) {
	const min, max = 10 * time.Millisecond, 80 * time.Millisecond
	within := func(d, want time.Duration) bool {
		return d >= want*8/10 && d <= want*12/10
	}
	b := newBackoff(min, max)
	want := min
	for i := range 8 {
		if d := b.delay(); !within(d, want) {
			t.Fatalf("delay %d = %v, want %v ± 20%%", i, d, want)
		}
		b.next = b.exp.NextBackOff() // as wait does, without the sleep
		want = min * (1 << (i + 1))
		if want > max {
			want = max
		}
	}
	b.reset()
	if d := b.delay(); !within(d, min) {
		t.Fatalf("after reset: delay %v, want %v ± 20%%", d, min)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if newBackoff(time.Hour, time.Hour).wait(ctx) {
		t.Fatal("wait with an ended context reported true")
	}
}
