#!/usr/bin/python3
"""sparkguard web-get: read one URL of node_exporter, Prometheus or Alertmanager, through their web auth.

    web-get [--wait SECONDS] [--user USER --password-file FILE] [--ca FILE] URL

Prints the body and exits 0 on HTTP 200; exits 1 otherwise (after retrying for --wait seconds).
Installed by role monitoring (sparkguard). Used by prometheus.service's readiness check (as the
prometheus user, with the password from its systemd credential) and by `sparkguard audit` (as root).
A real file, not a template: it takes every value as an argument.
"""

import argparse
import base64
import ssl
import sys
import time
import urllib.error
import urllib.request


def fetch(url: str, user: str | None, password_file: str | None, ca: str | None) -> str:
    request = urllib.request.Request(url)
    if user:
        with open(password_file or "", encoding="utf-8") as handle:
            password = handle.read().strip()
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = ssl.create_default_context(cafile=ca) if url.startswith("https:") else None
    with urllib.request.urlopen(request, timeout=3, context=context) as response:
        body: bytes = response.read()
    return body.decode("utf-8", errors="replace")


def main() -> int:
    parser = argparse.ArgumentParser(prog="web-get")
    parser.add_argument("--wait", type=float, default=0.0)
    parser.add_argument("--user")
    parser.add_argument("--password-file")
    parser.add_argument("--ca")
    parser.add_argument("url")
    args = parser.parse_args()
    deadline = time.monotonic() + args.wait
    while True:
        try:
            sys.stdout.write(fetch(args.url, args.user, args.password_file, args.ca))
            return 0
        except (OSError, urllib.error.URLError, ssl.SSLError) as error:
            if time.monotonic() >= deadline:
                print(f"web-get: {args.url}: {error}", file=sys.stderr)
                return 1
            time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
