"""Unit tests (no server) of Client.audit_events: the request's filters,
paging, and the conversion of the answer."""

import datetime
import unittest

import sandboxd
from sandboxd._gen.sandbox.v1 import sandbox_pb2 as pb


class PagingStub:
    """Answers ListAuditEvents with two pages, recording the requests."""

    def __init__(self):
        self.requests = []

    def ListAuditEvents(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        ev = pb.AuditEvent(tenant="acme", token_name="ci-bot", action="execute",
                           sandbox_id="sb-aaaaaaaaaaaaaaaaaaaa", command_id="c-%d" % len(self.requests),
                           bytes=21, outcome="ok")
        ev.time.FromDatetime(datetime.datetime(2026, 1, 2, 3, 4, 5))
        ev.duration.FromMilliseconds(3)
        if not request.page_token:
            return pb.ListAuditEventsResponse(events=[ev], next_page_token="next")
        return pb.ListAuditEventsResponse(events=[ev])


class AuditTest(unittest.TestCase):
    def test_filters_paging_and_conversion(self):
        client = sandboxd.Client("127.0.0.1:1")  # never connects: the stub is faked
        self.addCleanup(client.close)
        stub = PagingStub()
        client._stub = stub
        since = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
        events = client.audit_events(sandbox_id="sb-aaaaaaaaaaaaaaaaaaaa", action="execute", since=since)
        self.assertEqual([e.command_id for e in events], ["c-1", "c-2"])
        first = stub.requests[0]
        self.assertEqual((first.sandbox_id, first.action, first.page_token), ("sb-aaaaaaaaaaaaaaaaaaaa", "execute", ""))
        self.assertEqual(first.since.ToDatetime(tzinfo=datetime.timezone.utc), since)
        self.assertFalse(first.HasField("until"))
        self.assertEqual(stub.requests[1].page_token, "next")
        e = events[0]
        self.assertEqual((e.tenant, e.token_name, e.action, e.outcome, e.bytes), ("acme", "ci-bot", "execute", "ok", 21))
        self.assertEqual(e.time, datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc))
        self.assertEqual(e.duration, datetime.timedelta(milliseconds=3))

    def test_limit(self):
        client = sandboxd.Client("127.0.0.1:1")
        self.addCleanup(client.close)
        stub = PagingStub()
        client._stub = stub
        self.assertEqual(len(client.audit_events(limit=1)), 1)
        self.assertEqual([r.page_size for r in stub.requests], [1])


if __name__ == "__main__":
    unittest.main()
