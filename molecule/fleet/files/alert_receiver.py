#!/usr/bin/env python3
"""The fleet owner's webhook, for the fleet scenario's monitoring host: a receiver on loopback.

  alert_receiver.py serve PORT FILE
      Answers every POST on 127.0.0.1:PORT with 200 and appends its body to FILE as one JSON
      line, with the wall-clock time it arrived and the path it was sent to ({"at": ...,
      "path": "/hook", "payload": ...}): what Alertmanager sent, in order.
  alert_receiver.py wait FILE TIMEOUT_S STATUS:ALERTNAME:LABEL=VALUE[,LABEL=VALUE] [...]
      [--since EPOCH] [--path /hook]
      Waits, at most TIMEOUT_S, until FILE holds one notification per expectation, each carrying
      an alert of that name in that status (firing or resolved) with those labels, that arrived
      after --since (and was sent to --path, default /hook: the fleet owner's). Prints
      {expectation: arrival time} as JSON; exits 1 with what was received when the time runs
      out.
"""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def parse_expectation(text):
    """'firing:Name:rig=a,code=31' -> ('firing', 'Name', {'rig': 'a', 'code': '31'})."""
    status, name, *rest = text.split(":", 2)
    labels = dict(pair.split("=", 1) for pair in (rest[0].split(",") if rest and rest[0] else []))
    return status, name, labels


def first_arrival(notifications, expectation, since, path="/hook"):
    """The arrival time of the first notification to `path` after `since` meeting
    `expectation`."""
    status, name, labels = expectation
    for notification in notifications:
        if notification["at"] < since or notification.get("path", "/hook") != path:
            continue
        for alert in notification["payload"].get("alerts", []):
            found = alert.get("labels", {})
            if (alert.get("status") == status and found.get("alertname") == name
                    and all(found.get(k) == v for k, v in labels.items())):
                return notification["at"]
    return None


def read(path):
    try:
        with open(path, encoding="utf-8") as lines:
            return [json.loads(line) for line in lines if line.strip()]
    except FileNotFoundError:
        return []


def serve(port, path):
    class Receiver(BaseHTTPRequestHandler):
        def log_message(self, format, *args):  # noqa: A002
            pass

        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with open(path, "a", encoding="utf-8") as out:
                out.write(json.dumps({"at": time.time(), "path": self.path,
                                      "payload": json.loads(body)}) + "\n")
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    ThreadingHTTPServer(("127.0.0.1", port), Receiver).serve_forever()


def wait(path, timeout_s, texts, since, sent_to="/hook"):
    expectations = {text: parse_expectation(text) for text in texts}
    deadline = time.monotonic() + timeout_s
    while True:
        notifications = read(path)
        found = {text: first_arrival(notifications, e, since, sent_to)
                 for text, e in expectations.items()}
        if all(at is not None for at in found.values()):
            print(json.dumps(found))
            return 0
        if time.monotonic() > deadline:
            missing = [text for text, at in found.items() if at is None]
            seen = [(n["at"], [(a["status"], a["labels"]) for a in n["payload"].get("alerts", [])])
                    for n in notifications]
            print(json.dumps({"missing": missing, "received": seen}))
            return 1
        time.sleep(0.5)


def main(argv):
    if argv[:1] == ["serve"] and len(argv) == 3:
        serve(int(argv[1]), argv[2])
        return 0
    if argv[:1] == ["wait"] and len(argv) >= 4:
        options = {"--since": "0", "--path": "/hook"}
        for flag in options:
            if flag in argv:
                at = argv.index(flag)
                options[flag] = argv[at + 1]
                argv = argv[:at] + argv[at + 2:]
        return wait(argv[1], float(argv[2]), argv[3:], float(options["--since"]),
                    options["--path"])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
