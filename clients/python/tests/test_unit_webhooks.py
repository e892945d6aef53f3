"""Unit tests of sandboxd.webhooks.verify against a request signed by the
Go library sandboxd signs with (the vector is checked on the Go side too:
orchestrator/webhooks TestSignatureVector)."""

import unittest

from sandboxd.webhooks import WebhookVerificationError, verify

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
TS = 1795720480
BODY = b'{"type":"killed"}'
HEADERS = {
    "webhook-id": "evt_1",
    "webhook-timestamp": str(TS),
    "webhook-signature": "v1,Ud47HdT45AgVxT6IWH+9sI6hjnJL9FrY6eMygOKQQyw=",
}


class VerifyTest(unittest.TestCase):
    def test_genuine(self):
        self.assertEqual(verify(SECRET, HEADERS, BODY, now=TS + 10), {"type": "killed"})

    def test_title_case_headers_and_several_signatures(self):
        h = {k.title(): v for k, v in HEADERS.items()}
        h["Webhook-Signature"] = "v1,bm90IGl0 " + HEADERS["webhook-signature"]
        self.assertEqual(verify(SECRET, h, BODY, now=TS), {"type": "killed"})

    def test_refused(self):
        cases = {
            "body changed": (HEADERS, b'{"type":"created"}', TS),
            "id changed": (dict(HEADERS, **{"webhook-id": "evt_2"}), BODY, TS),
            "timestamp changed": (dict(HEADERS, **{"webhook-timestamp": str(TS + 1)}), BODY, TS),
            "replayed later": (HEADERS, BODY, TS + 301),
            "from the future": (HEADERS, BODY, TS - 301),
            "no signature": ({k: v for k, v in HEADERS.items() if k != "webhook-signature"}, BODY, TS),
            "other version": (dict(HEADERS, **{"webhook-signature": "v2," + HEADERS["webhook-signature"][3:]}), BODY, TS),
        }
        for name, (headers, body, now) in cases.items():
            with self.subTest(name):
                with self.assertRaises(WebhookVerificationError):
                    verify(SECRET, headers, body, now=now)
        with self.assertRaises(WebhookVerificationError):
            verify("whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldY", HEADERS, BODY, now=TS)


if __name__ == "__main__":
    unittest.main()
