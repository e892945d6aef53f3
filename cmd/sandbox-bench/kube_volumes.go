package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	sandboxclient "github.com/sandboxd/sandboxd/client"
)

// Named volumes on the Kubernetes backend (volumes.go in
// orchestrator/backend/kube): a replica whose volumes are claims of the
// real nodes' local volumes makes a volume, writes its first file while no
// Pod mounts it (a volume server Pod started for the call), starts a
// sandbox that mounts it and reads the file, and uploads kubeVolMB through
// the running server; each round interleaved with the same steps on the
// Docker backend's sandboxd.
var (
	mKubeVolFirst  = metric{"kube_volume_first_call", "kubernetes: first files call on a new volume no Pod mounts, UploadVolumeFile of 1 KB (p50)", "ms", true, "faster", "slower"}
	mKubeVolMount  = metric{"kube_volume_sandbox_first_result", "kubernetes: new sandbox mounting the volume, first result reading its file (p50)", "ms", true, "faster", "slower"}
	mKubeVolUpload = metric{"kube_volume_upload", "kubernetes: UploadVolumeFile of 16 MB to a served volume (median)", "MB/s", false, "faster", "slower"}
)

// kubeVolMB is what the upload figure sends.
const kubeVolMB = 16

func (b *bench) kubeVolumes(ctx context.Context, k *kubeEnv) (err error) {
	metrics := []metric{mKubeVolFirst, mKubeVolMount, mKubeVolUpload}
	if k.cluster == nil || k.cluster.StorageClass == "" {
		for _, m := range metrics {
			b.rep.add(row(m, nan, "", nan, nil, "not measured: the test kubelet mounts no volume claims (--kube-nodes real)"))
		}
		return nil
	}
	b.progress("kubernetes: named volumes on the real nodes' local volumes")
	r, err := b.replica(ctx, k, "bench-vol", "--kube-storage-class="+k.cluster.StorageClass)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, r.stop()) }()
	var kFirst, kMount, dFirst, dMount latencies
	var kUp, dUp []float64
	n := max(b.cfg.Cold, 1)
	for i := range n {
		for _, kube := range []bool{i%2 == 0, i%2 != 0} { // rotate which backend goes first
			c := b.c
			if kube {
				c = r.c
			}
			first, mount, up, err := b.volumeRound(ctx, c, fmt.Sprintf("%v-%d", kube, i))
			if err != nil {
				err = fmt.Errorf("volume round (kubernetes %v): %w", kube, err)
				b.fail(err, metrics...)
				return err
			}
			if kube {
				kFirst, kMount, kUp = append(kFirst, first), append(kMount, mount), append(kUp, up)
			} else {
				dFirst, dMount, dUp = append(dFirst, first), append(dMount, mount), append(dUp, up)
			}
		}
	}
	peer := "Docker backend (same run, interleaved, p50)"
	b.rep.add(row(mKubeVolFirst, ms(kFirst.percentile(50)), peer, ms(dFirst.percentile(50)), nil,
		fmt.Sprintf("%d rounds, a new volume each; on Kubernetes the call waits for the volume's server Pod (the io sidecar alone, on the claim) to start; Docker writes to the volume's mount on the host", n)))
	b.rep.add(row(mKubeVolMount, ms(kMount.percentile(50)), peer, ms(dMount.percentile(50)), nil,
		"AcquireSandbox with the volume at /mnt/v, then reading the file: a Pod with the volume's claim (no pool Pod can have it), on the node holding the volume; Docker bind-mounts it into a new container"))
	b.rep.add(row(mKubeVolUpload, median(kUp), "Docker backend (same run, interleaved, median)", median(dUp), nil,
		fmt.Sprintf("%d MB through the sidecar of a Pod that mounts the volume (gRPC to the Pod, then the claim); Docker writes on the host", kubeVolMB)))
	return nil
}

// volumeRound makes a volume through c, times its first upload, a sandbox
// mounting it to its first result, and a kubeVolMB upload, and cleans up.
func (b *bench) volumeRound(ctx context.Context, c *client, tag string) (first, mount time.Duration, upMBs float64, err error) {
	name := "bench-vol-" + b.runID + "-" + tag
	if _, err := c.sb.CreateVolume(ctx, name, 64<<20); err != nil {
		return 0, 0, 0, err
	}
	defer func() { err = errors.Join(err, c.sb.DeleteVolume(context.WithoutCancel(ctx), name, true)) }()
	start := time.Now()
	if _, err := c.sb.UploadVolumeFile(ctx, name, "/in.txt", bytes.NewReader(bytes.Repeat([]byte("v"), 1000)), false); err != nil {
		return 0, 0, 0, err
	}
	first = time.Since(start)
	start = time.Now()
	acq, err := c.sb.Acquire(ctx, b.user("kube-vol-"+tag), sandboxclient.WithVolume(name, "/mnt/v", false))
	if err == nil {
		defer c.delete(context.WithoutCancel(ctx), acq.ID)
		_, err = c.expect(ctx, acq.ID, "len(open('/mnt/v/in.txt').read())", "1000")
	}
	if err != nil {
		return 0, 0, 0, err
	}
	mount = time.Since(start)
	data := bytes.Repeat([]byte("sandboxd volume bench "), kubeVolMB*1_000_000/22+1)[:kubeVolMB*1_000_000]
	start = time.Now()
	if _, err := c.sb.UploadVolumeFile(ctx, name, "/big.bin", bytes.NewReader(data), true); err != nil {
		return 0, 0, 0, err
	}
	return first, mount, float64(kubeVolMB) / time.Since(start).Seconds(), nil
}
