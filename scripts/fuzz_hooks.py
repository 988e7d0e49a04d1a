"""Schemathesis hooks of scripts/fuzz.sh.

A Stripe webhook is accepted only with `Stripe-Signature: t=<unix seconds>,v1=<hex
HMAC-SHA256(secret, t + "." + body)>`, which no schema can generate. Half of the cases of
`POST /billing/v1/stripe` meant to be valid are therefore replaced by an event of a type the gateway records
and ignores, signed with the endpoint's secret, so that the operation is exercised past
its signature check too; the other half go as generated (and answer 400 BAD_SIGNATURE).
"""

import hashlib
import hmac
import json
import os
import random
import time
import uuid

import schemathesis

SECRET = os.environ.get("TOLLGATE_FUZZ_WEBHOOK_SECRET", "")


@schemathesis.hook
def before_call(context, case, kwargs):
    if case.operation.path != "/billing/v1/stripe" or not SECRET or random.random() < 0.5:
        return
    # Only a case meant to be valid: a negative one must stay invalid.
    if case.meta is None or case.meta.generation.mode.value != "positive":
        return
    event = {"id": f"evt_fuzz_{uuid.uuid4().hex}", "type": "fuzz.ignored", "data": {"object": {}}}
    # The bytes the transport sends for a JSON body (`json.dumps`, default separators).
    body = json.dumps(event, allow_nan=False).encode()
    stamp = int(time.time())
    signature = hmac.new(SECRET.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    case.body = event
    headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "stripe-signature"}
    headers["Stripe-Signature"] = f"t={stamp},v1={signature}"
    case.headers = headers
