package driver

import (
	"runtime"
	"sync"
)

// spareThreads is how many OS threads the driver creates up front.
//
// Sandboxed code runs as the same user in the same pids cgroup as the
// driver, so a fork bomb can use up every task the container may have. The
// Go runtime dies when it cannot create a thread it needs, and the driver
// would die with it. The runtime never destroys idle threads, so threads
// made at start-up stay available for the blocking calls (waiting for child
// processes, file I/O) the driver makes while a bomb holds the rest.
const spareThreads = 16

// reserveThreads makes the Go runtime create spareThreads OS threads now:
// each goroutine pins its own thread while all of them are alive, then
// releases it to the runtime's idle pool.
func reserveThreads() {
	var ready, release sync.WaitGroup
	ready.Add(spareThreads)
	release.Add(1)
	for range spareThreads {
		go func() {
			runtime.LockOSThread()
			ready.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	release.Done()
}
