package egress

import (
	"context"
	"log/slog"
	"time"

	"github.com/vishvananda/netlink"
)

// hostAddrsUpdates is the subscription's channel's buffer: changes come
// in bursts (a sandbox's veth, an interface with several addresses), and
// each burst costs one listing however many it holds.
const hostAddrsUpdates = 256

// watchHostAddrs follows the host's address changes through a netlink
// subscription (RTNLGRP_IPV4_IFADDR and RTNLGRP_IPV6_IFADDR) until h.stop
// is closed. The subscription is made before the addresses are listed, so
// that no change between the two is missed; each change (a burst of them
// at once) drops the kept list and lists the addresses again. An error the
// subscription reports (a message it could not read, the socket's buffer
// overflowing: changes lost) drops the kept list too; when it ends, it is
// made again, after a wait that grows while it keeps failing, and the
// checks meanwhile list the addresses afresh. A subscription that
// delivers nothing (a kernel, or gVisor's netstack, that accepts it and
// sends no changes) is no worse than the periodic re-read it replaces:
// the list is read again every hostAddrsBackstop whatever happens.
func watchHostAddrs(h *hostAddrs) {
	defer close(h.stopped)
	wait := hostAddrsRetryMin
	failing := false
	for {
		updates := make(chan netlink.AddrUpdate, hostAddrsUpdates)
		done := make(chan struct{})
		err := netlink.AddrSubscribeWithOptions(updates, done, netlink.AddrSubscribeOptions{
			ErrorCallback: func(err error) {
				h.invalidate()
				select {
				case <-h.stop:
					return // the socket closed by close
				default:
				}
				h.log.Warn("egress: the subscription to the host's address changes reported an error; listing the addresses again", "error", err)
			},
		})
		if err != nil {
			close(done)
			h.invalidate()
			level := slog.LevelWarn
			if failing {
				level = slog.LevelDebug // said once per streak
			}
			h.log.Log(context.Background(), level, "egress: subscribing to the host's address changes failed; every check lists the addresses afresh until it works", "error", err, "retry_in", wait)
			failing = true
			if !h.sleep(wait) {
				return
			}
			wait = min(2*wait, hostAddrsRetryMax)
			continue
		}
		failing = false
		h.refresh()
		began := time.Now()
		if !h.follow(updates, done) {
			return
		}
		if time.Since(began) > hostAddrsRetryMax {
			wait = hostAddrsRetryMin // it worked for a while: not a failing loop
		}
		h.log.Warn("egress: the subscription to the host's address changes ended; every check lists the addresses afresh until it is made again", "retry_in", wait)
		if !h.sleep(wait) {
			return
		}
		wait = min(2*wait, hostAddrsRetryMax)
	}
}

// follow handles one subscription's changes until it ends (true: make
// another) or h.stop is closed (false). Either way the subscription's
// socket is closed (done) and its channel read until the library's
// goroutine closes it, so that goroutine never blocks on a send.
func (h *hostAddrs) follow(updates chan netlink.AddrUpdate, done chan struct{}) bool {
	defer func() {
		close(done)
		for range updates {
		}
		h.invalidate()
	}()
	backstop := time.NewTicker(hostAddrsBackstop)
	defer backstop.Stop()
	for {
		select {
		case <-h.stop:
			return false
		case <-backstop.C:
			h.refresh()
		case _, ok := <-updates:
			if !ok {
				return true
			}
			h.invalidate()
			for more := true; more; { // the rest of the burst
				select {
				case _, ok := <-updates:
					if !ok {
						return true
					}
				default:
					more = false
				}
			}
			h.refresh()
		}
	}
}
