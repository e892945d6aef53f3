//go:build !linux

package egress

// watchHostAddrs follows nothing where there is no netlink: the kept list
// stays unset, so every check lists the host's addresses afresh.
func watchHostAddrs(h *hostAddrs) {
	defer close(h.stopped)
	<-h.stop
}
