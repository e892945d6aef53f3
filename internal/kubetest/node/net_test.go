//go:build linux

package node

import (
	"reflect"
	"testing"
)

// staleForwards deletes only ForwardTo's rules of gone test processes:
// never Docker's, never a live process's, never another chain's.
func TestStaleForwards(t *testing.T) {
	listing := `-P FORWARD DROP
-A FORWARD -s 198.18.7.0/24 -d 198.18.9.1/32 -m comment --comment pid-41 -j ACCEPT
-A FORWARD -s 198.18.9.1/32 -d 198.18.7.0/24 -m comment --comment pid-42 -j ACCEPT
-A FORWARD -j DOCKER-USER
-A FORWARD -m comment --comment "kube-router netpol - ABC" -j KUBE-ROUTER-FORWARD
-A FORWARD -m comment --comment pid-x -j ACCEPT
-A DOCKER-USER -m comment --comment pid-41 -j ACCEPT
-A FORWARD -o docker0 -j DOCKER
`
	gone := func(pid int) bool { return pid == 41 }
	want := [][]string{{"FORWARD", "-s", "198.18.7.0/24", "-d", "198.18.9.1/32", "-m", "comment", "--comment", "pid-41", "-j", "ACCEPT"}}
	if got := staleForwards(listing, gone); !reflect.DeepEqual(got, want) {
		t.Errorf("staleForwards = %q; want %q", got, want)
	}
}
