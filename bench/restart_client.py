#!/usr/bin/env python3
"""The HTTP side of bench/restart_table.sh, standard library only.

    restart_client.py first-answer PORT_FILE DIM START_EPOCH [TIMEOUT_S]
        Polls a binary search (k 10, one query) until it is answered 200; prints the seconds
        from START_EPOCH (the launch of the job, `date +%s.%N`) to that answer.
    restart_client.py write PORT_FILE DIM ACKED_FILE FIRST_ID
        Upserts one new row per request (ids FIRST_ID, FIRST_ID + 1, ...) over the binary route
        until the service stops answering; appends each acknowledged id to ACKED_FILE as it is
        acknowledged (flushed at once: what a client would have been told).
    restart_client.py check PORT_FILE ACKED_FILE
        Deletes every acknowledged id in one binary delete; prints "acknowledged N present M":
        the delete counts the ids that were live, so M == N when no acknowledged write was lost.
"""

import http.client
import json
import random
import struct
import sys
import time


def port(port_file):
    with open(port_file) as f:
        return int(f.read().strip())


def post(conn, target, body):
    conn.request("POST", target, body, {"Content-Type": "application/octet-stream"})
    r = conn.getresponse()
    return r.status, r.read()


def first_answer(port_file, dim, start, timeout_s=900.0):
    q = struct.pack("<%df" % dim, *[random.uniform(-1, 1) for _ in range(dim)])
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port(port_file), timeout=30)
            status, _ = post(conn, "/v1/search?k=10", q)
            conn.close()
            if status == 200:
                print("%.3f" % (time.time() - start))
                return 0
        except (OSError, ValueError, http.client.HTTPException):
            pass  # no port file yet, not listening yet, or 503 while it starts
        time.sleep(0.05)
    print("no answer within %.0f s" % timeout_s, file=sys.stderr)
    return 1


def write(port_file, dim, acked_file, first_id):
    rng = random.Random(first_id)
    conn = http.client.HTTPConnection("127.0.0.1", port(port_file), timeout=30)
    with open(acked_file, "a") as out:
        i = first_id
        while True:
            body = struct.pack("<q", i) + struct.pack("<%df" % dim, *[rng.uniform(-1, 1) for _ in range(dim)])
            try:
                status, reply = post(conn, "/v1/upsert?n=1", body)
            except (OSError, http.client.HTTPException):
                return 0  # the service is gone: the last request is unanswered
            if status != 200:
                print("upsert of id %d answered %d: %s" % (i, status, reply[:200]), file=sys.stderr)
                return 0 if status == 503 else 1
            out.write("%d\n" % i)
            out.flush()
            i += 1


def check(port_file, acked_file):
    with open(acked_file) as f:
        ids = [int(line) for line in f if line.strip()]
    if not ids:
        print("acknowledged 0 present 0")
        return 1
    conn = http.client.HTTPConnection("127.0.0.1", port(port_file), timeout=120)
    status, reply = post(conn, "/v1/delete?n=%d" % len(ids), struct.pack("<%dq" % len(ids), *ids))
    if status != 200:
        print("delete answered %d: %s" % (status, reply[:200]), file=sys.stderr)
        return 1
    deleted = json.loads(reply)["deleted"]
    print("acknowledged %d present %d" % (len(ids), deleted))
    return 0 if deleted == len(ids) else 1


if __name__ == "__main__":
    a = sys.argv[1:]
    if a and a[0] == "first-answer" and len(a) in (4, 5):
        sys.exit(first_answer(a[1], int(a[2]), float(a[3]), *(float(x) for x in a[4:])))
    if a and a[0] == "write" and len(a) == 5:
        sys.exit(write(a[1], int(a[2]), a[3], int(a[4])))
    if a and a[0] == "check" and len(a) == 3:
        sys.exit(check(a[1], a[2]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
