"""Verify sandboxd's lifecycle webhooks (sandboxd --webhooks FILE).

Each request is signed by the Standard Webhooks scheme: ``webhook-id``,
``webhook-timestamp`` (Unix seconds) and ``webhook-signature`` (``v1,`` and
the base64 of HMAC-SHA256, keyed by the secret's bytes, over
``"<id>.<timestamp>.<body>"``). ::

    from sandboxd.webhooks import verify, WebhookVerificationError

    try:
        event = verify(SECRET, request.headers, request.body)  # the raw bytes
    except WebhookVerificationError:
        return 401
    if seen(event["data"]["event_id"]):      # at least once: deduplicate
        return 200
    handle(event["type"], event["data"])
"""

import base64
import hashlib
import hmac
import json
import time

__all__ = ["verify", "WebhookVerificationError", "TOLERANCE_SECONDS"]

# A timestamp further than this from the receiver's clock is refused: it
# stops replays, while a retry is signed anew.
TOLERANCE_SECONDS = 300


class WebhookVerificationError(Exception):
    """The request is not a genuine, fresh sandboxd webhook."""


def _header(headers, name):
    value = headers.get(name)
    if value is None:
        value = headers.get(name.title())
    if not value:
        raise WebhookVerificationError("missing header %s" % name)
    return value


def verify(secret, headers, body, now=None, tolerance=TOLERANCE_SECONDS):
    """Check the request's signature and timestamp; return its JSON body.

    secret is the endpoint's ``whsec_...`` secret; headers any mapping with
    ``get`` (the header names are matched in lower case or title case);
    body the raw request body (bytes). Raises WebhookVerificationError.
    """
    if isinstance(body, str):
        body = body.encode()
    if not secret.startswith("whsec_"):
        raise ValueError("the secret must start with whsec_")
    key = base64.b64decode(secret[len("whsec_"):])
    msg_id = _header(headers, "webhook-id")
    ts = _header(headers, "webhook-timestamp")
    sigs = _header(headers, "webhook-signature")
    try:
        ts_int = int(ts)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not a number") from None
    now = time.time() if now is None else now
    if abs(now - ts_int) > tolerance:
        raise WebhookVerificationError("webhook-timestamp is more than %ds from now" % tolerance)
    mac = hmac.new(key, ("%s.%s." % (msg_id, ts)).encode() + body, hashlib.sha256).digest()
    want = base64.b64encode(mac).decode()
    for sig in sigs.split():
        version, _, value = sig.partition(",")
        if version == "v1" and hmac.compare_digest(want, value):
            return json.loads(body)
    raise WebhookVerificationError("no matching signature")
