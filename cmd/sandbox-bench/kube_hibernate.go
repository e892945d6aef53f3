package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubeHibernation measures hibernation on the Kubernetes backend: a
// replica with --kube-storage-class on the real nodes' local volumes
// hibernates a sandbox with a small namespace and wakes it by a command,
// --cold times, interleaved with the same cycle on the Docker backend's
// sandboxd, so that both see the machine's load alike. The test kubelet
// mounts no volume claims: there the rows say so.
func (b *bench) kubeHibernation(ctx context.Context, k *kubeEnv) (err error) {
	if k.cluster == nil || k.cluster.StorageClass == "" {
		note := "not measured: the test kubelet mounts no volume claims (--kube-nodes real)"
		b.rep.add(row(mKubeHib, nan, "", nan, nil, note))
		b.rep.add(row(mKubeWake, nan, "", nan, nil, note))
		return nil
	}
	b.progress("kubernetes: hibernation on the real nodes' local volumes")
	r, err := b.replica(ctx, k, "bench-hib", "--kube-storage-class="+k.cluster.StorageClass)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, r.stop()) }()
	kubeID, err := r.c.acquire(ctx, b.user("kube-hib"), nil)
	if err != nil {
		return err
	}
	defer r.c.delete(context.WithoutCancel(ctx), kubeID)
	dockerID, err := b.newSandbox(ctx, "kube-hib-peer", nil)
	if err != nil {
		return err
	}
	for _, sb := range []struct {
		c  *client
		id string
	}{{r.c, kubeID}, {b.c, dockerID}} {
		if _, err := sb.c.exec(ctx, sb.id, "python", hibSmallSetup); err != nil {
			return err
		}
	}
	var kHib, kWake, kGone, dHib, dWake latencies
	n := max(b.cfg.Cold, 1)
	for i := range n {
		// Rotate which backend goes first.
		order := []bool{i%2 == 0, i%2 != 0}
		for _, kube := range order {
			c, id := b.c, dockerID
			if kube {
				c, id = r.c, kubeID
			}
			start := time.Now()
			if _, err := c.sb.Hibernate(ctx, id); err != nil {
				return fmt.Errorf("hibernate (kubernetes %v): %w", kube, err)
			}
			hib := time.Since(start)
			if kube {
				// The hibernated Pod's object goes once the kubelet has
				// stopped its containers (its grace period); a wake
				// before then waits for it (the new Pod has its name).
				// Measured apart: a wake after an idle hibernation finds
				// it gone.
				gone, err := podGoneAfter(ctx, k, id)
				if err != nil {
					return err
				}
				kGone = append(kGone, gone)
			}
			wake, err := c.expect(ctx, id, "f(x)", "42")
			if err != nil {
				return fmt.Errorf("wake (kubernetes %v): %w", kube, err)
			}
			if kube {
				kHib, kWake = append(kHib, hib), append(kWake, wake)
			} else {
				dHib, dWake = append(dHib, hib), append(dWake, wake)
			}
		}
	}
	b.rep.add(row(mKubeHib, ms(kHib.percentile(50)), "Docker backend (same run, interleaved, p50)", ms(dHib.percentile(50)), nil,
		fmt.Sprintf("over %d cycles through a replica with --kube-storage-class (static local volumes): the snapshot record through the io sidecar, the record on the claim, the Pod deleted; max %s ms",
			n, fmtNum(ms(kHib.percentile(100))))))
	b.rep.add(row(mKubeWake, ms(kWake.percentile(50)), "Docker backend (same run, interleaved, p50)", ms(dWake.percentile(50)), nil,
		fmt.Sprintf("Execute on the hibernated sandbox once its Pod's object is gone: a new Pod on its claim (scheduled to the volume's node), its sidecar and driver started, the restore record, then the command; max %s ms. The hibernated Pod's object went %s ms (p50) after HibernateSandbox returned (the kubelet stopping its containers); a wake in that time waits for it",
			fmtNum(ms(kWake.percentile(100))), fmtNum(ms(kGone.percentile(50))))))
	return nil
}

// podGoneAfter waits (bounded) until sandbox id's Pod object is gone and
// says how long that took.
func podGoneAfter(ctx context.Context, k *kubeEnv, id string) (time.Duration, error) {
	start := time.Now()
	name := "sbx-" + strings.TrimPrefix(id, "sb-")
	for {
		_, err := k.cs.CoreV1().Pods(k.namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return time.Since(start), nil
		case err != nil:
			return 0, err
		case time.Since(start) > time.Minute:
			return 0, fmt.Errorf("the pod of hibernated sandbox %s is still there after a minute", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
