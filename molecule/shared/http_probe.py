"""HTTP probes the scenarios' verify steps run on a node (Debian's python3, standard library only).

Every backend the scenarios start answers with its pod's name, so counting answers tells which pods a
Service sends requests to.

  http_probe.py count URL N
      N requests; prints {"answers": {name: count}, "failures": count}.
  http_probe.py drop URL NAME WATCH -- COMMAND...
      Runs COMMAND (which takes NAME out of the Service, e.g. deletes the pod), then sends requests for WATCH
      seconds; prints how long after COMMAND returned the last request that failed or that NAME answered
      was sent ("last_bad", null if none), and how many requests were sent after it ("good_after").
  http_probe.py during URL -- COMMAND...
      Sends requests back to back for as long as COMMAND (a rolling update, say) runs; prints
      {"answers": {name: count}, "failures": count, "status": COMMAND's exit status}.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter

TIMEOUT = 1.0


def fetch(url: str) -> str | None:
    """The answer's body, or None if the request failed."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
            return response.read().decode().strip()
    except (OSError, urllib.error.URLError):
        return None


def count(url: str, requests: int) -> dict[str, object]:
    answers = [fetch(url) for _ in range(requests)]
    return {"answers": dict(Counter(answer for answer in answers if answer)),
            "failures": sum(answer is None for answer in answers)}


def drop(url: str, name: str, watch: float, command: list[str]) -> dict[str, object]:
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    started = time.monotonic()
    last_bad: float | None = None
    good_after = 0
    while (sent := time.monotonic() - started) < watch:
        answer = fetch(url)
        if answer is None or answer == name:
            last_bad, good_after = sent, 0
        else:
            good_after += 1
    return {"last_bad": last_bad, "good_after": good_after}


def during(url: str, command: list[str]) -> dict[str, object]:
    answers: Counter[str] = Counter()
    failures = 0
    finished = threading.Event()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    threading.Thread(target=lambda: (process.wait(), finished.set()), daemon=True).start()
    while not finished.is_set():
        answer = fetch(url)
        if answer is None:
            failures += 1
        else:
            answers[answer] += 1
        time.sleep(0.05)
    return {"answers": dict(answers), "failures": failures, "status": process.returncode}


def main(argv: list[str]) -> None:
    match argv:
        case ["count", url, requests]:
            result = count(url, int(requests))
        case ["drop", url, name, watch, "--", *command] if command:
            result = drop(url, name, float(watch), command)
        case ["during", url, "--", *command] if command:
            result = during(url, command)
        case _:
            sys.exit(__doc__)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
