package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	sandboxclient "github.com/sandboxd/sandboxd/client"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// reattach restarts sandboxd with sbs live and times, from the new process's
// start, its health turning SERVING and the first GetSandbox succeeding.
// Then it checks that every sandbox came back with its Python state.
func (b *bench) reattach(ctx context.Context, sbs []string) error {
	if b.d == nil {
		note := "not measured: needs a self-started sandboxd (no --addr) to restart"
		b.rep.add(row(mReattach, nan, "", nan, atMost(1000, "≤ 1 s"), note))
		b.rep.add(row(mReattachGet, nan, "", nan, atMost(1000, "≤ 1 s"), note))
		return nil
	}
	fail := func(err error) error {
		b.fail(err, mReattach, mReattachGet)
		return err
	}
	live, err := containersOf(ctx, b.dcfg.stateDir, false)
	if err != nil {
		return fail(err)
	}
	addr := b.d.addr
	if err := b.d.stop(); err != nil {
		return fail(err)
	}
	b.c.close()

	// The floor any reattach stands on: Docker listing the containers.
	psStart := time.Now()
	if _, err := containersOf(ctx, b.dcfg.stateDir, true); err != nil {
		return fail(err)
	}
	ps := time.Since(psStart)

	probe, err := sandboxclient.Dial(addr, sandboxclient.WithDialOptions(
		// Reconnect at once while the new process comes up, not after
		// gRPC's default back-off of a second and more.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: time.Millisecond, Multiplier: 1.2, MaxDelay: 5 * time.Millisecond}, MinConnectTimeout: time.Minute}),
		// Calls wait for the connection instead of failing while it is down.
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true))))
	if err != nil {
		return fail(err)
	}
	defer probe.Close()
	type probeResult struct {
		serving, get time.Time
		err          error
	}
	probed := make(chan probeResult, 1)
	pctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	go func() {
		var r probeResult
		for r.serving.IsZero() && pctx.Err() == nil {
			cctx, ccancel := context.WithTimeout(pctx, time.Second)
			err := probe.Ready(cctx)
			ccancel()
			if err == nil {
				r.serving = time.Now()
			}
		}
		for r.get.IsZero() && pctx.Err() == nil {
			if _, err := probe.Get(pctx, sbs[0]); err == nil {
				r.get = time.Now()
			}
		}
		r.err = pctx.Err()
		probed <- r
	}()

	d, err := startDaemon(ctx, b.dcfg, addr)
	if err != nil {
		return fail(err)
	}
	b.d = d
	r := <-probed
	if r.err != nil {
		return fail(fmt.Errorf("restarted sandboxd: no SERVING and GetSandbox within 3 minutes: %w", r.err))
	}
	serving, get := r.serving.Sub(d.started), r.get.Sub(d.started)

	c, err := dial(addr, b.runID+"r")
	if err != nil {
		return fail(err)
	}
	b.c = c
	// Every sandbox is back, running, and kept its variables.
	for _, sb := range sbs {
		info, err := c.sb.Get(ctx, sb)
		if err != nil {
			return fail(fmt.Errorf("after the restart: %w", err))
		}
		if st := info.GetState(); st != sandboxv1.SandboxState_SANDBOX_STATE_RUNNING {
			return fail(fmt.Errorf("after the restart sandbox %s is %v: %s", sb, st, info.GetStateReason()))
		}
	}
	if _, err := c.expect(ctx, sbs[0], "x * 2", "42"); err != nil {
		return fail(fmt.Errorf("after the restart: %w", err))
	}
	note := fmt.Sprintf("%d live sandboxes (%d containers running); timed from the new process's start; all found RUNNING afterwards, with their variables",
		len(sbs), len(live))
	b.rep.add(row(mReattach, ms(serving), "docker ps of the same containers (the floor)", ms(ps), atMost(1000, "≤ 1 s"), note))
	b.rep.add(row(mReattachGet, ms(get), "", nan, atMost(1000, "≤ 1 s"), ""))
	return nil
}
