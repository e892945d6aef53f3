package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// TestHibOutcome: both backends read a snapshot or restore record's end
// through HibOutcome: a timeout, a failed follow and a missing outcome
// each say which record, the cause stays matchable, and what the sandbox
// answered is sanitised.
func TestHibOutcome(t *testing.T) {
	gone := SandboxNotFound("sb-x")
	for _, tc := range []struct {
		name string
		snap *ioproto.HibResult
		err  error
		want string // in the error; "" for none
	}{
		{name: "timeout", err: fmt.Errorf("follow: %w", context.DeadlineExceeded), want: "the sandbox did not answer the snapshot record within 2s"},
		{name: "follow failed", err: gone, want: "snapshot record: "},
		{name: "no outcome", want: "the sandbox answered the snapshot record without an outcome"},
		{name: "answered", snap: &ioproto.HibResult{Level: "bogus", Bytes: -5, Reason: "a\xffb"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := HibOutcome(ioproto.KindSnapshot, 2*time.Second, tc.snap, tc.err)
			if tc.want == "" {
				if err != nil || got == nil || got.Level != ioproto.LevelFiles || got.Bytes != 0 || !strings.HasPrefix(got.Reason, "a") || strings.Contains(got.Reason, "\xff") {
					t.Fatalf("HibOutcome = %+v, %v; want the outcome sanitised", got, err)
				}
				return
			}
			if err == nil || got != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("HibOutcome = %+v, %v; want an error saying %q", got, err, tc.want)
			}
			if tc.err == gone && !errors.Is(err, gone) {
				t.Errorf("%v does not wrap the follow's error", err)
			}
		})
	}
}
