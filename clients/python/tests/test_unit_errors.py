"""Unit tests (no server): gRPC status → exception mapping, and the
conversion of proto events into dataclasses."""

import base64
import datetime
import unittest

import grpc

import sandboxd
from sandboxd._gen.sandbox.v1 import sandbox_pb2 as pb
from sandboxd.errors import from_rpc_error
from sandboxd.events import event_from_proto


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details):
        super().__init__()
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


class ErrorMappingTest(unittest.TestCase):
    CASES = [
        (grpc.StatusCode.NOT_FOUND, sandboxd.NotFound),
        (grpc.StatusCode.INVALID_ARGUMENT, sandboxd.InvalidArgument),
        (grpc.StatusCode.ALREADY_EXISTS, sandboxd.AlreadyExists),
        (grpc.StatusCode.FAILED_PRECONDITION, sandboxd.FailedPrecondition),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, sandboxd.ResourceExhausted),
        (grpc.StatusCode.UNAVAILABLE, sandboxd.Unavailable),
        (grpc.StatusCode.PERMISSION_DENIED, sandboxd.PermissionDenied),
        (grpc.StatusCode.UNAUTHENTICATED, sandboxd.Unauthenticated),
        (grpc.StatusCode.ABORTED, sandboxd.Aborted),
        (grpc.StatusCode.DEADLINE_EXCEEDED, sandboxd.DeadlineExceeded),
        (grpc.StatusCode.CANCELLED, sandboxd.Cancelled),
        (grpc.StatusCode.UNIMPLEMENTED, sandboxd.Unimplemented),
    ]

    def test_each_code_maps_to_its_class_with_the_message(self):
        for code, cls in self.CASES:
            with self.subTest(code=code.name):
                err = from_rpc_error(FakeRpcError(code, "the server's words"))
                self.assertIs(type(err), cls)
                self.assertIsInstance(err, sandboxd.SandboxdError)
                self.assertIs(err.code, code)
                self.assertEqual(err.message, "the server's words")
                self.assertIn("the server's words", str(err))
                self.assertIn(code.name, str(err))

    def test_other_codes_are_the_base_class(self):
        for code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DATA_LOSS):
            with self.subTest(code=code.name):
                err = from_rpc_error(FakeRpcError(code, "boom"))
                self.assertIs(type(err), sandboxd.SandboxdError)
                self.assertIs(err.code, code)
                self.assertEqual(err.message, "boom")

    def test_empty_details_still_give_a_message(self):
        err = from_rpc_error(FakeRpcError(grpc.StatusCode.UNAVAILABLE, None))
        self.assertIsInstance(err, sandboxd.Unavailable)
        self.assertTrue(err.message)

    def test_client_calls_raise_the_mapped_error_chained_to_the_rpc_error(self):
        client = sandboxd.Client("127.0.0.1:1")  # never connects: the call is faked
        self.addCleanup(client.close)
        rpc_err = FakeRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "max-sandboxes (3) reached")

        def method(request, metadata=None, timeout=None):
            raise rpc_err

        with self.assertRaises(sandboxd.ResourceExhausted) as cm:
            client._call(method, pb.AcquireSandboxRequest(user_id="alice"))
        self.assertEqual(cm.exception.message, "max-sandboxes (3) reached")
        self.assertIs(cm.exception.__cause__, rpc_err)

    def test_token_is_sent_as_bearer_metadata(self):
        client = sandboxd.Client("127.0.0.1:1", token="s3cret")
        self.addCleanup(client.close)
        seen = {}

        def method(request, metadata=None, timeout=None):
            seen["metadata"] = metadata
            return "ok"

        self.assertEqual(client._call(method, pb.GetSandboxRequest()), "ok")
        self.assertEqual(seen["metadata"], (("authorization", "Bearer s3cret"),))


class EventConversionTest(unittest.TestCase):
    def test_every_kind(self):
        ts = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
        started = pb.ExecuteEvent(seq=1, command_id="c", started=pb.Started(language="python"))
        started.started.time.FromDatetime(ts)
        png = b"\x89PNG\r\n\x1a\nrest"
        events = [
            started,
            pb.ExecuteEvent(seq=2, command_id="c", stdout=pb.OutputChunk(text="out")),
            pb.ExecuteEvent(seq=3, command_id="c", stderr=pb.OutputChunk(text="err")),
            pb.ExecuteEvent(seq=4, command_id="c", display=pb.Display(
                data={"image/png": base64.b64encode(png).decode(), "text/plain": "<Figure>"})),
            pb.ExecuteEvent(seq=5, command_id="c", result=pb.Result(data={"text/plain": "42"})),
            pb.ExecuteEvent(seq=6, command_id="c", error=pb.Error(
                ename="ValueError", evalue="bad", traceback=["Traceback\n", "ValueError: bad"])),
            pb.ExecuteEvent(seq=7, command_id="c", done=pb.Done(
                status=pb.COMMAND_STATUS_ERROR, exit_code=0, reason="r",
                files=[pb.FileRef(path="a.txt", size=3)])),
        ]
        got = [event_from_proto(e) for e in events]
        self.assertEqual([type(e) for e in got], [
            sandboxd.Started, sandboxd.Stdout, sandboxd.Stderr, sandboxd.Display,
            sandboxd.Result, sandboxd.Error, sandboxd.Done])
        self.assertEqual([e.seq for e in got], list(range(1, 8)))
        self.assertEqual(got[0].time, ts)
        self.assertEqual(got[1].text, "out")
        self.assertEqual(got[3].png, png)
        self.assertEqual(got[3].text, "<Figure>")
        self.assertEqual(got[4].text, "42")
        self.assertIsNone(got[4].png)
        self.assertEqual(got[5].format(), "Traceback\nValueError: bad\n")
        done = got[6]
        self.assertIs(done.status, sandboxd.CommandStatus.ERROR)
        self.assertEqual(done.exit_code, 0)  # set, even though zero
        self.assertEqual(done.files, [sandboxd.FileRef("a.txt", 3)])
        self.assertFalse(done.ok)

    def test_execution_count(self):
        done = event_from_proto(pb.ExecuteEvent(seq=1, done=pb.Done(status=pb.COMMAND_STATUS_OK, execution_count=4)))
        self.assertEqual(done.execution_count, 4)
        self.assertIsNone(event_from_proto(pb.ExecuteEvent(seq=1, done=pb.Done(exit_code=0))).execution_count)

    def test_exit_code_unset_and_unknown_status(self):
        done = event_from_proto(pb.ExecuteEvent(seq=1, done=pb.Done(status=99)))
        self.assertIsNone(done.exit_code)
        self.assertIs(done.status, sandboxd.CommandStatus.UNSPECIFIED)
        self.assertIsNone(done.time)
        ok = event_from_proto(pb.ExecuteEvent(seq=1, done=pb.Done(status=pb.COMMAND_STATUS_OK)))
        self.assertTrue(ok.ok)


if __name__ == "__main__":
    unittest.main()
