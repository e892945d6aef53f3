package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	sandboxclient "github.com/sandboxd/sandboxd/client"
)

// Snapshots and forks on the Kubernetes backend (kube_snapshots.go in
// orchestrator/backend/kube): a replica with --kube-snapshot-dir takes a
// snapshot of a sandbox with numpy and pandas imported and kubeSnapMB of
// random data in /workspace, starts a sandbox from it, and forks it, each
// round interleaved with the same steps on the Docker backend's sandboxd.
var (
	mKubeSnapTake  = metric{"kube_snapshot_take", "kubernetes: CreateSnapshot, numpy/pandas imported, 20 MB in /workspace (p50)", "ms", true, "faster", "slower"}
	mKubeSnapFirst = metric{"kube_snapshot_first_result", "kubernetes: new sandbox from the snapshot, first result with its globals (p50)", "ms", true, "faster", "slower"}
	mKubeFork      = metric{"kube_fork_3", "kubernetes: ForkSandbox of 3, all three with the state (wall time, p50)", "ms", true, "faster", "slower"}
)

// kubeSnapMB is the random data in the source's /workspace: what a
// snapshot copies besides the globals.
const kubeSnapMB = 20

func (b *bench) kubeSnapshots(ctx context.Context, k *kubeEnv) (err error) {
	metrics := []metric{mKubeSnapTake, mKubeSnapFirst, mKubeFork}
	b.progress("kubernetes: snapshots and forks through --kube-snapshot-dir")
	dir, err := os.MkdirTemp(k.dir, "snapshots-")
	if err != nil {
		return err
	}
	r, err := b.replica(ctx, k, "bench-snap", "--kube-snapshot-dir="+dir)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, r.stop()) }()
	setup := fmt.Sprintf(snapSetup, kubeSnapMB*1_000_000)
	kubeSrc, err := r.c.acquire(ctx, b.user("kube-snap-src"), nil)
	if err != nil {
		b.fail(err, metrics...)
		return err
	}
	defer r.c.delete(context.WithoutCancel(ctx), kubeSrc)
	dockerSrc, err := b.newSandbox(ctx, "kube-snap-peer", nil)
	if err != nil {
		b.fail(err, metrics...)
		return err
	}
	for _, sb := range []struct {
		c  *client
		id string
	}{{r.c, kubeSrc}, {b.c, dockerSrc}} {
		if _, err := sb.c.exec(ctx, sb.id, "python", setup); err != nil {
			b.fail(err, metrics...)
			return err
		}
	}
	var kTake, kFirst, kFork, dTake, dFirst, dFork latencies
	n := max(b.cfg.Cold, 1)
	for i := range n {
		for _, kube := range []bool{i%2 == 0, i%2 != 0} { // rotate which backend goes first
			c, src := b.c, dockerSrc
			if kube {
				c, src = r.c, kubeSrc
			}
			take, first, fork, err := b.snapshotRound(ctx, c, src, fmt.Sprintf("%v-%d", kube, i))
			if err != nil {
				err = fmt.Errorf("snapshot round (kubernetes %v): %w", kube, err)
				b.fail(err, metrics...)
				return err
			}
			if kube {
				kTake, kFirst, kFork = append(kTake, take), append(kFirst, first), append(kFork, fork)
			} else {
				dTake, dFirst, dFork = append(dTake, take), append(dFirst, first), append(dFork, fork)
			}
		}
	}
	peer := "Docker backend (same run, interleaved, p50)"
	b.rep.add(row(mKubeSnapTake, ms(kTake.percentile(50)), peer, ms(dTake.percentile(50)), nil,
		fmt.Sprintf("%d rounds; the live snapshot record (the globals' pickle), then /workspace and the pickle streamed by the io sidecar as one tar into the snapshot directory. Docker freezes the volume and copies its image (sparse, reflinked where it can)", n)))
	b.rep.add(row(mKubeSnapFirst, ms(kFirst.percentile(50)), peer, ms(dFirst.percentile(50)), nil,
		"AcquireSandbox with from_snapshot and `x * 2`: a Pod started, the archive sent to its sidecar and unpacked, the restore record; Docker copies the image and starts a container"))
	b.rep.add(row(mKubeFork, ms(kFork.percentile(50)), peer, ms(dFork.percentile(50)), nil,
		"ForkSandbox of 3 (a hidden snapshot, then three sandboxes from it, four at a time), each checked to have the source's x after (not timed)"))
	return nil
}

// snapshotRound takes a snapshot of src through c, starts a sandbox from
// it (to its first result), forks src three times, and cleans up.
func (b *bench) snapshotRound(ctx context.Context, c *client, src, tag string) (take, first, fork time.Duration, err error) {
	start := time.Now()
	s, err := c.sb.CreateSnapshot(ctx, src, "")
	if err != nil {
		return 0, 0, 0, err
	}
	take = time.Since(start)
	defer func() { err = errors.Join(err, c.sb.DeleteSnapshot(context.WithoutCancel(ctx), s.GetSnapshotId())) }()
	start = time.Now()
	acq, err := c.sb.Acquire(ctx, b.user("kube-from-snap-"+tag), sandboxclient.WithFromSnapshot(s.GetSnapshotId()))
	if err == nil {
		defer c.delete(context.WithoutCancel(ctx), acq.ID)
		_, err = c.expect(ctx, acq.ID, "x * 2", "42")
	}
	if err != nil {
		return 0, 0, 0, err
	}
	first = time.Since(start)
	start = time.Now()
	forks, err := c.sb.ForkSandbox(ctx, src, 3, nil)
	if err != nil {
		return 0, 0, 0, err
	}
	fork = time.Since(start)
	for _, f := range forks {
		if f.Err != nil {
			err = errors.Join(err, f.Err)
			continue
		}
		defer c.delete(context.WithoutCancel(ctx), f.Sandbox.GetSandboxId())
		if _, ferr := c.expect(ctx, f.Sandbox.GetSandboxId(), "x * 2", "42"); ferr != nil {
			err = errors.Join(err, ferr)
		}
	}
	return take, first, fork, err
}
