#!/usr/bin/python3
"""hostile_s3.py -- an S3 impersonator that answers wrongly on purpose.

A small S3 store in memory (path-style: /BUCKET/KEY; GET with Range and
If-None-Match, HEAD, PUT with If-None-Match: *, DELETE, ListObjectsV2 with
prefix, max-keys and continuation tokens; any bucket exists; signatures are
not checked) that can be told to answer a request wrongly, for tests of
keel's object-store client against a store that is slow, wrong, partial or
lying. Standard library only; run it with /usr/bin/python3. It listens on
127.0.0.1 at an ephemeral port, which it writes to --port-file once it is
listening, and stops on SIGTERM or SIGINT, when --parent PID has gone, or
after --max-seconds (600).

  /usr/bin/python3 test/objstore/hostile_s3.py --port-file F
        [--mode MODE [--match GLOB] [--method M] [--count N] [--param K=V]...]
        [--rule 'mode=MODE&match=GLOB&count=N&K=V'] ...

A rule is a mode, the requests it applies to and its parameters:
  match   a shell glob against the request's path with its query string
          ("/bucket/key", "/bucket?list-type=2&prefix=p%2F"); default "*"
  method  GET, HEAD, PUT or DELETE only; default any
  count   how many requests it takes, then it is gone; default no limit
Rules are tried in the order they were added; the first that matches a
request answers it, and a request no rule matches is answered right.

Modes (parameters and their defaults in brackets):
  normal        the right answer
  status        an S3 error answer with status code [503] and <Code> name
                [SlowDown]
  head200       200 to every HEAD, with Content-Length size [64] and an ETag,
                whether or not the object exists; and a GET of a missing key
                with "/manifest/" in it gets the newest object of that
                folder (by key) when there is one, else size bytes of noise
  list-repeat   every listing page says IsTruncated true with the same
                NextContinuationToken and the same keys
  list-endless  every listing page says IsTruncated true with a new token and
                keys [1000] new keys under the prefix
  list-outside  the listing also holds keys outside the prefix asked for
                ("elsewhere/0", "../up", the prefix's parent) beside the
                real ones
  list-time     the right listing, with LastModified time
                [9999-99-99T99:99:99Z] for every key
  trickle       the body at rate [2] bytes/s (the head too with head=1, and
                always for an answer without a body, such as HEAD's)
  chunked       the right answer, its body sent with Transfer-Encoding:
                chunked in chunks of chunk [7] bytes (valid HTTP)
  chunked-bad   Transfer-Encoding: chunked with a chunk-size line that is
                not hexadecimal
  short-length  Content-Length by [half the body] bytes less than the body
                sent (the extra bytes follow on the connection)
  long-length   Content-Length by [100] bytes more than the body sent, then
                the connection is held hold [0] s and closed
  no-206        a ranged GET answered 200 with the whole object
  redirect      status code [307] with Location: to [http://127.0.0.1:1]
                and the same path
  xml-garbage   status code [400] with a body of noise that opens <Error>
                and <Code> and never closes them
  xml-huge      status code [400] with an XML error body of size [16777216]
                bytes (its <Message> that long)
  nul-header    the right answer with a header that holds a NUL byte
                (in the ETag when where=etag, else in x-amz-meta-nul)
  close-mid-body the right head (its Content-Length) and at [half] bytes of
                the body, then the connection is closed
  not-modified  304 Not Modified, whatever the request asked
  precondition  412 Precondition Failed, whatever the request asked
  lost          the request is read and never answered: the connection stays
                open until the client closes it or the server stops

Control endpoint (answers JSON; "_hostile" can never be a bucket name):
  POST /_hostile/rule?mode=M&match=G&method=X&count=N&K=V   adds a rule
  POST /_hostile/mode?...      drops every rule, then adds this one
  POST /_hostile/reset         drops every rule (objects=1: and every object)
  GET  /_hostile/stats         requests answered, by mode; connections open
  GET  /_hostile/last          the last request: method, target, headers
                               (header=NAME: just that header's value)
  PUT  /_hostile/object?key=/BUCKET/KEY (body: the object) stores it as is
"""
import argparse
import fnmatch
import hashlib
import json
import os
import signal
import socket
import socketserver
import sys
import threading
import time
import urllib.parse
from email.utils import formatdate

MODES = ("normal status head200 list-repeat list-endless list-outside "
         "list-time trickle "
         "chunked chunked-bad short-length long-length no-206 redirect "
         "xml-garbage xml-huge nul-header close-mid-body not-modified "
         "precondition lost").split()

lock = threading.Lock()
objects = {}          # "/bucket/key" -> (bytes, etag, mtime)
rules = []            # dicts: mode, match, method, count, params
stats = {"requests": 0, "by_mode": {}, "open": 0}
last_req = {}           # the last request: method, target, headers
stopping = threading.Event()
endless_seq = [0]


class Gone(Exception):
    """The client closed the connection, or the answer ended it."""


def make_rule(q):
    """A rule from a dict of query parameters (each value a string)."""
    mode = q.pop("mode", "normal")
    if mode not in MODES:
        raise ValueError("no mode '%s' (modes: %s)" % (mode, " ".join(MODES)))
    rule = {"mode": mode, "match": q.pop("match", "*"),
            "method": q.pop("method", "").upper(),
            "count": int(q.pop("count", "-1")), "params": q}
    return rule


def take_rule(method, target):
    with lock:
        for r in rules:
            if r["method"] and r["method"] != method:
                continue
            if not fnmatch.fnmatchcase(target, r["match"]):
                continue
            if r["count"] == 0:
                continue
            if r["count"] > 0:
                r["count"] -= 1
            return r["mode"], dict(r["params"])
    return "normal", {}


def xml_escape(s):
    return (s.replace("&", "&amp;").replace("<", "&lt;")
            .replace(">", "&gt;"))


def s3_error(status, code, message, resource=""):
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
            '<Message>%s</Message><Resource>%s</Resource>'
            '<RequestId>hostile</RequestId></Error>' %
            (code, xml_escape(message), xml_escape(resource))).encode()
    return status, [("Content-Type", "application/xml")], body


def etag_of(data):
    return '"%s"' % hashlib.md5(data).hexdigest()


class Answer:
    def __init__(self, status, headers, body, head_only=False):
        self.status = status
        self.headers = headers
        self.body = body
        self.head_only = head_only
        self.filler = 0     # bytes of "x" streamed after body, then tail
        self.tail = b""


REASONS = {200: "OK", 204: "No Content", 206: "Partial Content",
           301: "Moved Permanently", 304: "Not Modified",
           307: "Temporary Redirect", 400: "Bad Request",
           403: "Forbidden", 404: "Not Found", 412: "Precondition Failed",
           416: "Range Not Satisfiable", 500: "Internal Server Error",
           503: "Service Unavailable"}


def listing(bucket, q, mode, params):
    prefix = q.get("prefix", "")
    token = q.get("continuation-token", "")
    max_keys = int(q.get("max-keys", "1000") or "1000")
    base = "/%s/" % bucket
    with lock:
        keys = sorted(k[len(base):] for k in objects if k.startswith(base))
        keys = [k for k in keys if k.startswith(prefix)]
        info = {k: objects[base + k] for k in keys}
    if mode == "list-endless":
        n = int(params.get("keys", "1000"))
        with lock:
            endless_seq[0] += 1
            seq = endless_seq[0]
        page = [("%sendless-%08d-%06d" % (prefix, seq, i), 1, 0.0)
                for i in range(n)]
        truncated, next_token = True, "endless-%d" % seq
    else:
        start = bytes.fromhex(token).decode() if token and all(
            c in "0123456789abcdef" for c in token) else ""
        rest = [k for k in keys if k > start] if start else keys
        page = [(k, len(info[k][0]), info[k][2]) for k in rest[:max_keys]]
        truncated = len(rest) > max_keys
        next_token = page[-1][0].encode().hex() if truncated else ""
        if mode == "list-repeat":
            page = [(k, len(info[k][0]), info[k][2]) for k in keys[:max_keys]]
            truncated, next_token = True, "the-same-token"
        elif mode == "list-outside":
            parent = prefix.rstrip("/").rpartition("/")[0]
            page = page + [("elsewhere/0", 5, 0.0), ("../up", 5, 0.0),
                           ((parent + "/sibling") if parent else "sibling",
                            5, 0.0)]
    out = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult '
           'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
           "<Name>%s</Name><Prefix>%s</Prefix><KeyCount>%d</KeyCount>"
           "<MaxKeys>%d</MaxKeys><IsTruncated>%s</IsTruncated>" %
           (bucket, xml_escape(prefix), len(page), max_keys,
            "true" if truncated else "false")]
    if token:
        out.append("<ContinuationToken>%s</ContinuationToken>" %
                   xml_escape(token))
    if next_token:
        out.append("<NextContinuationToken>%s</NextContinuationToken>" %
                   xml_escape(next_token))
    for k, size, mtime in page:
        when = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(mtime))
        if mode == "list-time":
            when = params.get("time", "9999-99-99T99:99:99Z")
        out.append("<Contents><Key>%s</Key><LastModified>%s</LastModified>"
                   "<ETag>&quot;0&quot;</ETag><Size>%d</Size>"
                   "<StorageClass>STANDARD</StorageClass></Contents>" %
                   (xml_escape(k), xml_escape(when), size))
    out.append("</ListBucketResult>")
    return Answer(200, [("Content-Type", "application/xml")],
                  "".join(out).encode())


def newest_in_folder(path):
    folder = path.rpartition("/")[0] + "/"
    with lock:
        ks = sorted(k for k in objects if k.startswith(folder))
        return objects[ks[-1]] if ks else None


def right_answer(method, path, q, headers, body, mode, params):
    """The answer a store would give (or head200's and the listings' lies)."""
    parts = path.lstrip("/").split("/", 1)
    bucket = parts[0]
    key = urllib.parse.unquote(parts[1]) if len(parts) > 1 else ""
    full = "/%s/%s" % (bucket, key)
    if not key:
        if method == "GET" and q.get("list-type") == "2":
            return listing(bucket, q, mode, params)
        return Answer(*s3_error(400, "InvalidRequest", "not supported",
                                path))
    if method == "PUT":
        with lock:
            if headers.get("if-none-match") == "*" and full in objects:
                return Answer(*s3_error(412, "PreconditionFailed",
                                        "At least one of the pre-conditions "
                                        "you specified did not hold", full))
            e = etag_of(body)
            objects[full] = (body, e, time.time())
        return Answer(200, [("ETag", e)], b"")
    if method == "DELETE":
        with lock:
            objects.pop(full, None)
        return Answer(204, [], b"")
    if method not in ("GET", "HEAD"):
        return Answer(*s3_error(405, "MethodNotAllowed", method, full))
    with lock:
        obj = objects.get(full)
    if mode == "head200":
        size = int(params.get("size", "64"))
        if method == "HEAD":
            data = obj[0] if obj else b""
            return Answer(200, [("ETag", obj[1] if obj else '"hostile"'),
                                ("Content-Length", str(len(data) if obj
                                                       else size))],
                          b"", head_only=True)
        if obj is None and "/manifest/" in full:
            obj = newest_in_folder(full)
            if obj is None:
                noise = os.urandom(size)
                obj = (noise, etag_of(noise), time.time())
    if obj is None:
        if method == "HEAD":
            return Answer(404, [("Content-Length", "0")], b"", head_only=True)
        return Answer(*s3_error(404, "NoSuchKey", "The specified key does "
                                "not exist.", full))
    data, etag, mtime = obj
    common = [("ETag", etag), ("Last-Modified", formatdate(mtime, usegmt=True))]
    inm = headers.get("if-none-match")
    if inm and inm == etag:
        return Answer(304, common, b"", head_only=True)
    if method == "HEAD":
        return Answer(200, common + [("Content-Length", str(len(data)))], b"",
                      head_only=True)
    rng = headers.get("range")
    if rng and mode != "no-206" and rng.startswith("bytes="):
        a, _, b = rng[6:].partition("-")
        first = int(a)
        last = min(int(b), len(data) - 1) if b else len(data) - 1
        if first >= len(data):
            return Answer(416, [("Content-Range", "bytes */%d" % len(data))] +
                          s3_error(416, "InvalidRange", "range", full)[1],
                          s3_error(416, "InvalidRange", "range", full)[2])
        return Answer(206, common + [("Content-Range", "bytes %d-%d/%d" %
                                      (first, last, len(data)))],
                      data[first:last + 1])
    return Answer(200, common, data)


def control(method, path, q, body):
    """The control endpoint: (status, JSON-able answer)."""
    what = path[len("/_hostile/"):]
    try:
        if what == "stats":
            with lock:
                return 200, dict(stats, rules=[dict(r) for r in rules],
                                 objects=len(objects))
        if what == "last":
            with lock:
                if "header" in q:
                    v = last_req.get("headers", {}).get(q["header"].lower())
                    return (200, {"value": v}) if v is not None else \
                        (404, {"error": "no header " + q["header"]})
                return 200, dict(last_req)
        if what == "reset":
            with lock:
                rules.clear()
                if q.get("objects") == "1":
                    objects.clear()
            return 200, {"ok": True}
        if what in ("rule", "mode"):
            rule = make_rule(dict(q))
            with lock:
                if what == "mode":
                    rules.clear()
                rules.append(rule)
            return 200, {"ok": True, "rule": rule}
        if what == "object" and method == "PUT":
            with lock:
                objects[q["key"]] = (body, etag_of(body), time.time())
            return 200, {"ok": True}
    except (ValueError, KeyError) as e:
        return 400, {"error": str(e)}
    return 404, {"error": "no control '%s'" % what}


class Conn(socketserver.BaseRequestHandler):
    def setup(self):
        self.sock = self.request
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        with lock:
            stats["open"] += 1

    def finish(self):
        with lock:
            stats["open"] -= 1

    def recv_more(self):
        d = self.sock.recv(65536)
        if not d:
            raise Gone()
        self.buf += d

    def read_head(self):
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > 65536:
                raise Gone()
            self.recv_more()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = (lines[0].split(" ") + ["", ""])[:3]
        headers = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            headers[k.strip().lower()] = v.strip()
        return method, target, headers

    def read_exact(self, n):
        while len(self.buf) < n:
            self.recv_more()
        d, self.buf = self.buf[:n], self.buf[n:]
        return d

    def read_body(self, headers):
        if headers.get("expect", "").lower() == "100-continue":
            self.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if headers.get("transfer-encoding", "").lower() == "chunked":
            out = b""
            while True:
                while b"\r\n" not in self.buf:
                    self.recv_more()
                line, _, self.buf = self.buf.partition(b"\r\n")
                n = int(line.split(b";")[0], 16)
                out += self.read_exact(n)
                self.read_exact(2)
                if n == 0:
                    return out
        return self.read_exact(int(headers.get("content-length", "0")))

    def send(self, data, rate=0):
        if not rate:
            self.sock.sendall(data)
            return
        step = max(1, int(rate / 10)) if rate >= 10 else 1
        pause = step / rate
        for i in range(0, len(data), step):
            if stopping.is_set():
                raise Gone()
            self.sock.sendall(data[i:i + step])
            time.sleep(pause)

    def hold(self, seconds):
        end = time.time() + seconds if seconds >= 0 else float("inf")
        self.sock.settimeout(0.2)
        while time.time() < end and not stopping.is_set():
            try:
                if not self.sock.recv(65536):
                    break
            except socket.timeout:
                continue
            except OSError:
                break
        raise Gone()

    def handle(self):
        try:
            while not stopping.is_set():
                self.one()
        except (Gone, OSError, ValueError):
            pass

    def one(self):
        method, target, headers = self.read_head()
        path, _, query = target.partition("?")
        q = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        if path.startswith("/_hostile/"):
            body = self.read_body(headers)
            st, js = control(method, path, q, body)
            data = json.dumps(js).encode()
            self.send(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" %
                      (st, b"OK" if st == 200 else b"Error", len(data)) + data)
            return
        mode, p = take_rule(method, target)
        with lock:
            stats["requests"] += 1
            stats["by_mode"][mode] = stats["by_mode"].get(mode, 0) + 1
            last_req.clear()
            last_req.update(method=method, target=target, headers=headers)
        if mode == "lost":
            # read what came and never answer
            self.hold(float(p.get("hold", "-1")))
        body = self.read_body(headers)
        a = self.answer(mode, p, method, path, q, headers, body)
        self.write(mode, p, method, a)

    def answer(self, mode, p, method, path, q, headers, body):
        if mode == "status":
            code = int(p.get("code", "503"))
            name = p.get("name", "SlowDown" if code == 503 else "InternalError")
            return Answer(*s3_error(code, name, "hostile status", path))
        if mode == "redirect":
            code = int(p.get("code", "307"))
            to = p.get("to", "http://127.0.0.1:1")
            return Answer(code, [("Location", to + path)], b"")
        if mode == "not-modified":
            return Answer(304, [("ETag", '"hostile"')], b"", head_only=True)
        if mode == "precondition":
            return Answer(*s3_error(412, "PreconditionFailed",
                                    "hostile precondition", path))
        if mode == "xml-garbage":
            noise = bytes(b for b in os.urandom(700) if b not in b"<>")
            return Answer(int(p.get("code", "400")),
                          [("Content-Type", "application/xml")],
                          b"<?xml version='1.0'?><Error><Code>" + noise)
        if mode == "xml-huge":
            size = int(p.get("size", str(16 << 20)))
            head = b"<?xml version='1.0'?><Error><Code>HostileHuge</Code>" \
                   b"<Message>"
            tail = b"</Message></Error>"
            a = Answer(int(p.get("code", "400")),
                       [("Content-Type", "application/xml")], head)
            a.filler = max(0, size - len(head) - len(tail))
            a.tail = tail
            return a
        return right_answer(method, path, q, headers, body, mode, p)

    def write(self, mode, p, method, a):
        hs = list(a.headers)
        body = a.body
        names = {k.lower() for k, _ in hs}
        if mode == "nul-header":
            if p.get("where") == "etag":
                hs = [(k, v) for k, v in hs if k.lower() != "etag"]
                hs.append(("ETag", '"ab\0cd"'))
            else:
                hs.append(("x-amz-meta-nul", "a\0b"))
        length = len(body) + a.filler + len(a.tail)
        chunked = mode in ("chunked", "chunked-bad") and not a.head_only
        if chunked:
            hs.append(("Transfer-Encoding", "chunked"))
        elif "content-length" not in names:
            declared = length
            if mode == "short-length":
                declared = length - int(p.get("by", str(length // 2)))
            elif mode == "long-length":
                declared = length + int(p.get("by", "100"))
            hs.append(("Content-Length", str(max(0, declared))))
        hs.append(("x-amz-request-id", "hostile"))
        head = "HTTP/1.1 %d %s\r\n" % (a.status, REASONS.get(a.status, "X"))
        head += "".join("%s: %s\r\n" % (k, v) for k, v in hs) + "\r\n"
        wire = head.encode("latin-1")
        rate = float(p.get("rate", "2")) if mode == "trickle" else 0
        if method == "HEAD" or a.head_only:
            self.send(wire, rate)
            return
        if chunked:
            n = int(p.get("chunk", "7"))
            parts = [wire]
            for i in range(0, len(body), n):
                c = body[i:i + n]
                size = b"zz" if mode == "chunked-bad" else b"%x" % len(c)
                parts.append(size + b"\r\n" + c + b"\r\n")
            parts.append(b"0\r\n\r\n")
            self.send(b"".join(parts), rate)
            return
        if mode == "close-mid-body":
            at = int(p.get("at", str(length // 2)))
            self.send(wire + body[:at])
            self.sock.shutdown(socket.SHUT_RDWR)
            raise Gone()
        if rate and p.get("head") != "1":
            self.send(wire)     # the head at once, the body trickled
            self.send(body, rate)
        else:
            self.send(wire + body, rate)
        if a.filler:
            block = b"x" * 65536
            left = a.filler
            while left:
                n = min(left, len(block))
                self.send(block[:n])
                left -= n
            self.send(a.tail)
        if mode == "long-length":
            self.hold(float(p.get("hold", "0")))


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--mode")
    ap.add_argument("--match", default="*")
    ap.add_argument("--method", default="")
    ap.add_argument("--count", default="-1")
    ap.add_argument("--param", action="append", default=[])
    ap.add_argument("--rule", action="append", default=[])
    ap.add_argument("--parent", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=600)
    a = ap.parse_args()
    if a.mode:
        q = dict(kv.split("=", 1) for kv in a.param)
        q.update(mode=a.mode, match=a.match, method=a.method, count=a.count)
        rules.append(make_rule(q))
    for r in a.rule:
        rules.append(make_rule(dict(urllib.parse.parse_qsl(r))))
    srv = Server(("127.0.0.1", 0), Conn)
    port = srv.server_address[1]
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
    os.rename(tmp, a.port_file)

    def stop(*_):
        stopping.set()
        threading.Thread(target=srv.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    started = time.time()

    def watch():
        while not stopping.is_set():
            if a.parent and os.getppid() != a.parent:
                stop()
            if time.time() - started > a.max_seconds:
                stop()
            time.sleep(0.5)
    threading.Thread(target=watch, daemon=True).start()
    srv.serve_forever(poll_interval=0.2)
    srv.server_close()


if __name__ == "__main__":
    main()
