package main

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"time"

	sandboxclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/sandboxdproc"
)

// The shapes phase: what a warm pool gives each shape of sandbox that
// users combine (claim, then shape: orchestrator/backend/docker/shape.go),
// next to a cold create of the main sandboxd (no pool) in the same run:
// a new user's first result, a wake of a numpy/pandas namespace, a fork
// of 2 and a start from a named snapshot. One sandboxd with make run's
// default pool (2) serves every shape, under the run's --runtime; with
// the network phase's test host it also allows network and keeps its
// default pool with network (2), for the allow-list shape.

// shape is one combination of options, as a caller gives them.
type shape struct {
	key, name string
	opts      []sandboxclient.AcquireOption
	// network: the shape needs the test host (network.go) and sandboxd's
	// pool with network.
	network bool
}

var benchShapes = []shape{
	{"sealed", "sealed, defaults", nil, false},
	{"env", "env", []sandboxclient.AcquireOption{sandboxclient.WithEnv(map[string]string{"BENCH_API_URL": "http://api.test", "BENCH_MODE": "shaped"})}, false},
	{"limits", "own limits", []sandboxclient.AcquireOption{sandboxclient.WithLimits(sandboxclient.Limits{MemoryBytes: 768 << 20, NanoCPUs: 500_000_000, PidsLimit: 200})}, false},
	{"allowlist", "network with an allow-list", []sandboxclient.AcquireOption{sandboxclient.WithNetworkPolicy(sandboxclient.NetworkPolicy{
		AllowOut: []string{netHost}, DenyOut: []string{"0.0.0.0/0"}})}, true},
	{"volume", "a volume", []sandboxclient.AcquireOption{sandboxclient.WithVolume(shapeVolume, "/data/bench", false)}, false},
}

// shapeVolume is the volume the volume shape mounts, made by the phase
// (and deleted with its sandboxd's state).
const shapeVolume = "bench-shape-volume"

// netShapeCheck is what a networked shape's sandbox runs once, untimed:
// the allowed test host answers through the gateway.
var netShapeCheck = "import urllib.request\nurllib.request.urlopen('http://" + netHost + "/', timeout=10).status"

// shapeKeysOf lists the shapes' keys, for --shapes.
func shapeKeysOf() []string {
	keys := make([]string, len(benchShapes))
	for i, s := range benchShapes {
		keys[i] = s.key
	}
	return keys
}

// The measures of each shape, with their targets given a cold create's
// first result (ms).
var shapeMeasures = []struct {
	key, name string
	target    func(cold float64) *target
}{
	{"first_result", "new user's first result", func(float64) *target { return atMost(10, "≤ 10 ms") }},
	{"wake", "wake to first result, numpy/pandas namespace (p50)", func(cold float64) *target {
		return atMost(math.Min(100, cold/4), fmt.Sprintf("≤ 0.25× cold (%s ms) and ≤ 100 ms", fmtNum(cold/4)))
	}},
	{"fork2", "fork of 2, wall time", func(cold float64) *target {
		return atMost(cold/2, fmt.Sprintf("≤ 0.5× one cold create (%s ms)", fmtNum(cold/2)))
	}},
	{"snapshot_start", "start from a snapshot to the first result with its globals", func(cold float64) *target {
		return atMost(cold/4, fmt.Sprintf("≤ 0.25× cold (%s ms)", fmtNum(cold/4)))
	}},
}

// shapeMetric is shape s's row for measure i.
func shapeMetric(s shape, i int) metric {
	m := shapeMeasures[i]
	return metric{"shape_" + s.key + "_" + m.key, s.name + ": " + m.name + ", warm pool", "ms", true, "faster", "slower"}
}

// shapeKeys are the phase's row keys, in order.
func shapeKeys() []string {
	var keys []string
	for _, s := range benchShapes {
		for i := range shapeMeasures {
			keys = append(keys, shapeMetric(s, i).key)
		}
	}
	return keys
}

// shapes runs the phase.
func (b *bench) shapes(ctx context.Context) error {
	var all []metric
	for _, s := range benchShapes {
		for i := range shapeMeasures {
			all = append(all, shapeMetric(s, i))
		}
	}
	if b.d == nil {
		for _, m := range all {
			b.rep.add(row(m, nan, "", nan, nil, "not measured: needs a self-started sandboxd (no --addr) to run one with a warm pool"))
		}
		return nil
	}
	// With the test host, the pool's sandboxd allows network, with an
	// egress instance and subnet of its own (the main sandboxd's are in
	// use), so its pool with network (two sandboxes) serves the networked
	// shape.
	var netFlags []string
	netSkip := b.net.skip
	if netSkip == "" && b.net.in == nil {
		netSkip = "no test host"
	}
	if netSkip == "" && wantsNetShape(b.cfg.shapes) {
		en, err := sandboxdproc.NewEgressNet('s', netip.MustParsePrefix("198.19.0.0/16"), b.net.in.Hosts[netHost].Addr, b.net.subnet.Addr())
		if err != nil {
			netSkip = err.Error()
		} else {
			netFlags = append(append([]string{"--allow-network"}, en.Flags()...),
				"--egress-hosts-file", b.net.in.HostsFile, "--egress-ca-file", b.net.caFile)
			defer func() {
				if err := en.Remove(); err != nil {
					b.progress("%v", err)
				}
			}()
		}
	}
	pd, err := b.startPoolDaemon(ctx, "shapes-state", netFlags...)
	if err != nil {
		b.fail(err, all...)
		return err
	}
	defer pd.stop()
	c, metricsAddr := pd.c, pd.metricsAddr
	made := &pd.made
	if b.cfg.shapes["volume"] {
		if _, err := c.sb.CreateVolume(ctx, shapeVolume, 64<<20); err != nil {
			b.fail(err, all...)
			return err
		}
		// Its sandboxes are deleted first (pd.stop, deferred above).
		defer func() {
			if err := c.sb.DeleteVolume(context.WithoutCancel(ctx), shapeVolume, true); err != nil {
				b.progress("delete the shapes' volume: %v", err)
			}
		}()
	}
	pooled := 2.0 // make run's default pool, and its pool with network
	if netFlags != nil {
		pooled += 2
	}
	full := func() error { return waitPoolAt(ctx, metricsAddr, pooled, 3*time.Minute) }
	rounds := max(b.cfg.ShapeRounds, 1)
	cold := b.coldP50
	note := func(what string) string {
		n := what + "; sandboxd with make run's default pool (2), each round once the pool is full again"
		if !math.IsNaN(cold) {
			n += fmt.Sprintf("; cold create's first result in this run %s ms", fmtNum(cold))
		}
		return n
	}

	for _, s := range benchShapes {
		ms4 := func(i int) metric { return shapeMetric(s, i) }
		if !b.cfg.shapes[s.key] {
			for i := range shapeMeasures {
				b.rep.add(row(ms4(i), nan, "", nan, nil, "not measured: not in --shapes"))
			}
			continue
		}
		if s.network && netFlags == nil {
			for i := range shapeMeasures {
				b.rep.add(row(ms4(i), nan, "", nan, nil, "not measured: "+netSkip))
			}
			continue
		}
		// A new user's first result.
		var first latencies
		var src string
		for r := 0; r < rounds && err == nil; r++ {
			if err = full(); err != nil {
				break
			}
			start := time.Now()
			var acq sandboxclient.Acquired
			if acq, err = c.sb.Acquire(ctx, b.user(fmt.Sprintf("shape-%s-%d", s.key, r)), s.opts...); err != nil {
				break
			}
			*made = append(*made, acq.ID)
			if _, err = c.expect(ctx, acq.ID, "1 + 1", "2"); err == nil {
				first = append(first, time.Since(start))
				src = acq.ID
			}
		}
		if err == nil && s.network {
			// Untimed: the claimed sandbox reaches the allowed host.
			_, err = c.expect(ctx, src, netShapeCheck, "200")
		}
		if err != nil {
			b.fail(err, ms4(0), ms4(1), ms4(2), ms4(3))
			return err
		}
		b.rep.add(row(ms4(0), ms(first.percentile(50)), "cold create (same run, p50)", cold, shapeMeasures[0].target(cold),
			note(fmt.Sprintf("p50 of %d: AcquireSandbox of a new user with these options, then 1 + 1", len(first)))))

		// A wake of a numpy/pandas namespace, in a pool container.
		var wakes, plain latencies // in a pool container, and not
		slow := 0
		if _, err = c.exec(ctx, src, "python", fwSmallSetup); err == nil {
			for len(wakes) < rounds && slow < rounds && err == nil {
				if _, err = c.sb.Hibernate(ctx, src); err != nil {
					break
				}
				if err = full(); err != nil {
					break
				}
				var dur time.Duration
				if dur, err = c.expect(ctx, src, fwSmallCheck, "42"); err != nil {
					break
				}
				if carried, cerr := wokeInPool(ctx, src); cerr != nil {
					err = cerr
				} else if carried {
					wakes = append(wakes, dur)
				} else {
					slow++
					plain = append(plain, dur)
				}
			}
		}
		switch {
		case err != nil:
			b.fail(err, ms4(1))
		case len(wakes) == 0:
			// None took a pool container (gVisor's never do): the ordinary
			// wake's figure, against the same target.
			b.rep.add(row(ms4(1), ms(plain.percentile(50)), "cold create (same run, p50)", cold, shapeMeasures[1].target(cold),
				note(fmt.Sprintf("p50 of %d: none of the wakes took a pool container (a new container each)", len(plain)))))
		default:
			b.rep.add(row(ms4(1), ms(wakes.percentile(50)), "cold create (same run, p50)", cold, shapeMeasures[1].target(cold),
				note(fmt.Sprintf("p50 of %d: Execute on the hibernated sandbox, woken in a started pool container, then the command", len(wakes)))))
		}
		err = nil

		// A fork of 2.
		var forkWall time.Duration
		if err = full(); err == nil {
			start := time.Now()
			var forks []sandboxclient.Fork
			if forks, err = c.sb.ForkSandbox(ctx, src, 2, nil); err == nil {
				forkWall = time.Since(start)
				for _, f := range forks {
					if f.Err != nil {
						err = f.Err
					} else {
						*made = append(*made, f.Sandbox.GetSandboxId())
					}
				}
			}
		}
		if err != nil {
			b.fail(err, ms4(2))
		} else {
			b.rep.add(row(ms4(2), ms(forkWall), "one cold create (same run, p50)", cold, shapeMeasures[2].target(cold),
				note("ForkSandbox with count 2: one snapshot of the source, two sandboxes with its globals and files")))
		}
		err = nil

		// A start from a named snapshot.
		var snapStart time.Duration
		var snap string
		if s, serr := c.sb.CreateSnapshot(ctx, src, ""); serr != nil {
			err = serr
		} else {
			snap = s.GetSnapshotId()
		}
		if err == nil {
			if err = full(); err == nil {
				start := time.Now()
				var acq sandboxclient.Acquired
				if acq, err = c.sb.Acquire(ctx, b.user("shape-"+s.key+"-from-snap"), sandboxclient.WithFromSnapshot(snap)); err == nil {
					*made = append(*made, acq.ID)
					if _, err = c.expect(ctx, acq.ID, fwSmallCheck, "42"); err == nil {
						snapStart = time.Since(start)
					}
				}
			}
			if derr := c.sb.DeleteSnapshot(ctx, snap); derr != nil && err == nil {
				err = derr
			}
		}
		if err != nil {
			b.fail(err, ms4(3))
		} else {
			b.rep.add(row(ms4(3), ms(snapStart), "cold create (same run, p50)", cold, shapeMeasures[3].target(cold),
				note("AcquireSandbox from a named snapshot of the numpy/pandas namespace, to the first result using its globals")))
		}
		err = nil
	}
	return nil
}

// wantsNetShape reports whether --shapes (shapes) asks for a networked
// shape.
func wantsNetShape(shapes map[string]bool) bool {
	for _, s := range benchShapes {
		if s.network && shapes[s.key] {
			return true
		}
	}
	return false
}

// waitPoolAt waits until sandboxd's warm pool (metrics at addr) holds n
// ready sandboxes.
func waitPoolAt(ctx context.Context, addr string, n float64, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if got, err := poolSize(ctx, addr); err == nil && got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the warm pool did not hold %v ready sandboxes within %v", n, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
