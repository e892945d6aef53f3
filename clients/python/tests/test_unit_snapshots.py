"""Unit tests (no server) of the snapshot and fork calls: the requests sent
and the answers' conversion, a fork's failure as its error class."""

import datetime
import unittest

import grpc

import sandboxd
from sandboxd._gen.sandbox.v1 import sandbox_pb2 as pb


class Stub:
    def __init__(self):
        self.requests = []

    def CreateSnapshot(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        s = pb.Snapshot(snapshot_id="snap-aaaaaaaaaaaaaaaaaaaa", name=request.name, tenant="acme",
                        sandbox_id=request.sandbox_id, level="globals", size_bytes=1234)
        s.created_at.FromDatetime(datetime.datetime(2026, 1, 2, 3, 4, 5))
        return pb.CreateSnapshotResponse(snapshot=s)

    def ForkSandbox(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        ok = pb.ForkResult(sandbox=pb.Sandbox(sandbox_id="sb-bbbbbbbbbbbbbbbbbbbb", user_id=request.user_ids[0]))
        bad = pb.ForkResult(error_code=grpc.StatusCode.ALREADY_EXISTS.value[0], error_message="user b has a sandbox")
        return pb.ForkSandboxResponse(results=[ok, bad])


class SnapshotTest(unittest.TestCase):
    def setUp(self):
        self.client = sandboxd.Client("127.0.0.1:1")  # never connects: the stub is faked
        self.addCleanup(self.client.close)
        self.client._stub = Stub()

    def test_create_snapshot(self):
        s = self.client.create_snapshot("sb-aaaaaaaaaaaaaaaaaaaa", name="before")
        self.assertEqual((s.id, s.name, s.level, s.size_bytes), ("snap-aaaaaaaaaaaaaaaaaaaa", "before", "globals", 1234))
        self.assertEqual(s.created_at.year, 2026)
        self.assertEqual(self.client._stub.requests[0].name, "before")

    def test_fork_results_are_sandboxes_or_errors(self):
        out = self.client.fork("sb-aaaaaaaaaaaaaaaaaaaa", count=2, user_ids=["a", "b"])
        self.assertEqual(self.client._stub.requests[0].count, 2)
        self.assertIsInstance(out[0], sandboxd.Sandbox)
        self.assertEqual(out[0].id, "sb-bbbbbbbbbbbbbbbbbbbb")
        self.assertIsInstance(out[1], sandboxd.AlreadyExists)
        self.assertIn("has a sandbox", out[1].message)


if __name__ == "__main__":
    unittest.main()
