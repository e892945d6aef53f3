package cmdlog

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/ioproto"
)

func TestHealthReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		ds   ioproto.DriverStatus
		want string
	}{
		{"older driver", ioproto.DriverStatus{Version: 1, PID: 7}, ""},
		{"ok", ioproto.DriverStatus{Health: ioproto.HealthOK, HealthReason: "ignored"}, ""},
		{"io full", ioproto.DriverStatus{Health: ioproto.HealthIOFull, HealthReason: "/io is full: 10 KiB free"}, "/io is full: 10 KiB free"},
		{"io full without reason", ioproto.DriverStatus{Health: ioproto.HealthIOFull}, "/io is full"},
		{"unknown health", ioproto.DriverStatus{Health: "on fire"}, `the sandbox's driver reports health "on fire"`},
		{"unknown long health", ioproto.DriverStatus{Health: strings.Repeat("h", 500)}, `the sandbox's driver reports health "` + strings.Repeat("h", 63) + "…"},
		{"long reason", ioproto.DriverStatus{Health: ioproto.HealthIOFull, HealthReason: strings.Repeat("r", 4000)}, strings.Repeat("r", MaxHealthReason) + "…"},
		{"not UTF-8", ioproto.DriverStatus{Health: ioproto.HealthIOFull, HealthReason: "bad \xff\xfe \xc3\x28"}, "bad \uFFFD \uFFFD("},
		{"cut inside a character", ioproto.DriverStatus{Health: ioproto.HealthIOFull, HealthReason: "x" + strings.Repeat("é", 600)}, "x" + strings.Repeat("é", (MaxHealthReason-1)/2) + "…"},
		{"long and not UTF-8", ioproto.DriverStatus{Health: ioproto.HealthIOFull, HealthReason: strings.Repeat("\xffx", 2000)}, strings.Repeat("\uFFFDx", MaxHealthReason/4) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := HealthReason(tc.ds)
			if got != tc.want {
				t.Errorf("HealthReason = %q; want %q", got, tc.want)
			}
			if !utf8.ValidString(got) || len(got) > MaxHealthReason+len("…") {
				t.Errorf("HealthReason of %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
			}
		})
	}
}
