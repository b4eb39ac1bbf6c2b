"""What the demo and the upgrade test do as a shop's buyers and its payment
provider would: JSON calls to the edge, and the provider's signed payment
notification (Seckill-Signature: t=<seconds>,v1=<hex HMAC-SHA256 of
"<t>.<raw body>"> with SECKILL_PAYMENT_WEBHOOK_SECRET)."""
import hashlib
import hmac
import json
import os
import time
import urllib.error
import urllib.request


def call(edge, method, path, body=None, headers=None, timeout=15):
    """(status, JSON answer); status 0 when the edge could not be reached."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://{edge}{path}", data=data, method=method)
    request.add_header("content-type", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        try:
            return error.code, json.load(error)
        except ValueError:
            return error.code, {}
    except (OSError, ValueError) as error:
        return 0, {"error": str(error)}


def notify(edge, order_id, payment_id, secret=None):
    """The payment provider's signed notification that payment_id paid order_id."""
    body = json.dumps({"paymentId": payment_id, "orderId": order_id, "status": "SUCCEEDED",
                       "amount": 9900, "currency": "CNY"}).encode()
    at = str(int(time.time()))
    key = (secret or os.environ["SECKILL_PAYMENT_WEBHOOK_SECRET"]).encode()
    signature = hmac.new(key, at.encode() + b"." + body, hashlib.sha256).hexdigest()
    return call(edge, "POST", "/api/payments/notify", body, {"Seckill-Signature": f"t={at},v1={signature}"})
