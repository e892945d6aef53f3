// Package e2e holds the end-to-end suites of sandboxd: the real sandboxd
// and sandboxctl binaries (built by the tests, see internal/sandboxdproc)
// against the real Docker engine and sandbox image, driven over gRPC.
//
//   - e2e_test.go: the harness (needE2E, start, client, execute) and the
//     lifecycle tests;
//   - acceptance_test.go, tenant_e2e_test.go: the promises users rely on;
//   - escape_test.go, fault_test.go, load_test.go, hostile_test.go: the
//     hardening suites, with their shared machinery in suites_test.go.
//     Each appends one summary line to the file SANDBOXD_SUITE_SUMMARY
//     names.
//
// make test runs the package as four shards, test binaries with a timeout
// each (scripts/test-shards.sh: the real-node suite, the test-kubelet and
// deployed suites, the hibernation-snapshot-template-webhook suites, the
// other Docker suites), so a new suite goes where its time balances them.
//
// The tests skip when Docker or the image is missing and fail instead
// under CI=true (internal/testenv); -short skips them all. The package has
// no non-test code: this file exists so that go vet and go list see it.
package e2e
