package main

import (
	"context"
	"fmt"
	"time"

	sandboxclient "github.com/sandboxd/sandboxd/client"
)

// The snapshot figures: what a named snapshot costs to take and to start
// from, and a fork, next to a new user's cold start in the same run. The
// source has numpy and pandas imported, a small namespace, and a
// --snapshot-mb (200) MB file in /workspace (its blocks are what a
// snapshot copies).
var (
	// Its name gets the size of the file (--snapshot-mb).
	mSnapTake  = metric{"snapshot_take", "CreateSnapshot: numpy/pandas imported, %d MB in /workspace (p50)", "ms", true, "faster", "slower"}
	mSnapSize  = metric{"snapshot_size", "snapshot size on disk: globals and the workspace's allocated blocks", "MiB", true, "less", "more"}
	mSnapFirst = metric{"snapshot_first_result", "new sandbox from the snapshot: first result with its globals (p50)", "ms", true, "faster", "slower"}
	mForkWall  = metric{"fork_5", "ForkSandbox of 5: all five with the state (wall time)", "ms", true, "faster", "slower"}
)

const snapSetup = "import numpy as np, pandas as pd\nx = 21\nframe = pd.DataFrame({'a': np.arange(1000)})\n" +
	"with open('/workspace/data.bin', 'wb') as f:\n    f.write(np.random.default_rng(1).bytes(%d))\n"

// snapshots measures taking a snapshot, starting from it and forking.
func (b *bench) snapshots(ctx context.Context) error {
	rounds := 5
	mTake := mSnapTake
	mTake.name = fmt.Sprintf(mTake.name, b.cfg.SnapshotMB)
	snapMetrics := []metric{mTake, mSnapSize, mSnapFirst, mForkWall}
	src, err := b.newSandbox(ctx, "snap-src", nil)
	if err == nil {
		_, err = b.c.exec(ctx, src, "python", fmt.Sprintf(snapSetup, b.cfg.SnapshotMB*1_000_000))
	}
	if err != nil {
		b.fail(err, snapMetrics...)
		return err
	}
	var take, first latencies
	var size int64
	for i := range rounds {
		start := time.Now()
		s, err := b.c.sb.CreateSnapshot(ctx, src, "")
		if err != nil {
			b.fail(err, snapMetrics...)
			return err
		}
		take = append(take, time.Since(start))
		size = s.GetSizeBytes()
		start = time.Now()
		acq, err := b.c.sb.Acquire(ctx, b.user(fmt.Sprintf("from-snap-%d", i)), sandboxclient.WithFromSnapshot(s.GetSnapshotId()))
		if err == nil {
			_, err = b.c.expect(ctx, acq.ID, "x * 2", "42")
		}
		if err != nil {
			b.fail(err, mSnapFirst, mForkWall)
			return err
		}
		first = append(first, time.Since(start))
		if err := b.deleteSandbox(ctx, acq.ID); err != nil {
			return err
		}
		if err := b.c.sb.DeleteSnapshot(ctx, s.GetSnapshotId()); err != nil {
			return err
		}
	}
	note := fmt.Sprintf("%d rounds; the source keeps running; /workspace frozen only while its image is copied (sparse, cp --reflink=auto)", rounds)
	b.rep.add(row(mTake, ms(take.percentile(50)), "", nan, nil, note))
	b.rep.add(row(mSnapSize, float64(size)/mib, "", nan, nil, fmt.Sprintf("the %d MB file is random, so its blocks are all allocated; an empty /workspace copies next to nothing", b.cfg.SnapshotMB)))
	b.rep.add(row(mSnapFirst, ms(first.percentile(50)), "cold create, first result (p50)", b.coldP50, nil,
		fmt.Sprintf("AcquireSandbox with from_snapshot (the workspace image copied, the container started, the globals unpickled) and `x * 2`; %d rounds", rounds)))

	start := time.Now()
	forks, err := b.c.sb.ForkSandbox(ctx, src, 5, nil)
	if err != nil {
		b.fail(err, mForkWall)
		return err
	}
	wall := time.Since(start)
	for _, f := range forks {
		if f.Err != nil {
			b.fail(f.Err, mForkWall)
			return f.Err
		}
		b.mu.Lock()
		b.created = append(b.created, f.Sandbox.GetSandboxId())
		b.mu.Unlock()
		if _, err := b.c.expect(ctx, f.Sandbox.GetSandboxId(), "x * 2", "42"); err != nil {
			b.fail(err, mForkWall)
			return err
		}
	}
	b.rep.add(row(mForkWall, ms(wall), "5 cold creates one after another (5 × the cold p50)", 5*b.coldP50, nil,
		"one snapshot, then five sandboxes from it, four at a time; each checked to have the source's x after"))
	for _, f := range forks {
		_ = b.deleteSandbox(ctx, f.Sandbox.GetSandboxId())
	}
	return b.deleteSandbox(ctx, src)
}
