#!/usr/bin/python3
"""mutate_hdf5.py -- a bounded byte-mutation run of the keel CLI's HDF5
reader (cli/h5file.c), which no libFuzzer target links (it needs libhdf5).

Takes the small files `mkhdf5 --hostile KIND` writes (each with one
defect), flips, overwrites or copies 1..16 bytes of one at a time, and runs
the CLI on the result the ways it reads HDF5: build (train, the distance
attribute) or search --truth (neighbors), whichever reads the seed's
defect, and a quarter of the time each of the others (search reads test). Run it with a sanitizer build of keel. A run is a finding when
the CLI is killed by a signal, a sanitizer reports, it passes the time
limit, or it fails without a "help:" line; findings are kept in OUT/.

  /usr/bin/python3 test/fuzz/mutate_hdf5.py KEEL MKHDF5 SECONDS OUT [SEED]

Exit status 1 if there was a finding. Prints what it tried: runs, exit
statuses, and the first line of each distinct message.
"""

import collections
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

KINDS = ["neighbors-float", "neighbors-int64", "distance-fixed-array",
         "distance-vlen-pair", "distance-fixed-utf8", "distance-escape",
         "distance-number", "train-unwritten", "train-chunk-missing",
         "train-external"]


def mutate(data, rng):
    b = bytearray(data)
    for _ in range(rng.randint(1, 16)):
        at = rng.randrange(len(b))
        how = rng.random()
        if how < 0.4:
            b[at] ^= 1 << rng.randrange(8)
        elif how < 0.7:
            b[at] = rng.choice([0, 1, 0x7f, 0x80, 0xff, rng.randrange(256)])
        elif how < 0.85:
            # A field set to a large or small value (sizes, counts, dims).
            width = rng.choice([2, 4, 8])
            val = rng.choice([0, 1, 2**31 - 1, 2**32 - 1, 2**63, 2**64 - 1,
                              rng.randrange(2**(8 * width))])
            val &= 2**(8 * width) - 1
            b[at:at + width] = val.to_bytes(width, "little")[:len(b) - at]
        else:
            src = rng.randrange(len(b))
            n = rng.randint(1, 32)
            b[at:at + n] = b[src:src + n]
        del b[len(data):]
    return bytes(b)


def main():
    if len(sys.argv) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    keel, mkhdf5, seconds, out = sys.argv[1:5]
    rng = random.Random(int(sys.argv[5]) if len(sys.argv) > 5 else 1)
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="keel-h5mut.")
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = ("detect_leaks=0:allocator_may_return_null=1:"
                           "hard_rss_limit_mb=3000")
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    try:
        seeds = {}
        for k in KINDS:
            p = os.path.join(work, k + ".hdf5")
            subprocess.run([mkhdf5, "--hostile", k, p], check=True)
            seeds[k] = open(p, "rb").read()
        idx = os.path.join(work, "small.keel")
        subprocess.run([keel, "build", idx,
                        os.path.join(work, "neighbors-float.hdf5")],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        statuses = collections.Counter()
        messages = collections.Counter()
        findings = 0
        runs = 0
        end = time.time() + float(seconds)
        i = 0
        while time.time() < end:
            i += 1
            kind = rng.choice(KINDS)
            data = mutate(seeds[kind], rng)
            mut = os.path.join(work, "m.hdf5")
            with open(mut, "wb") as f:
                f.write(data)
            # What reads the part the seed's defect is in, and now and
            # then the other two readers.
            build = ["build", os.path.join(work, "o.keel"), mut]
            search = ["search", idx, mut, "-k", "5"]
            truth = ["search", idx, mut, "-k", "5", "--truth", mut]
            todo = [truth if kind.startswith("neighbors") else build]
            if rng.random() < 0.25:
                todo.append(search)
            if rng.random() < 0.25:
                todo.append(build if todo[0] is truth else truth)
            for args in todo:
                if os.path.exists(os.path.join(work, "o.keel")):
                    os.unlink(os.path.join(work, "o.keel"))
                runs += 1
                try:
                    r = subprocess.run([keel] + args, env=env,
                                       stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, timeout=20)
                    st, err = r.returncode, r.stderr.decode("latin1")
                except subprocess.TimeoutExpired:
                    st, err = "timeout", ""
                statuses[(args[0] + (" --truth" if "--truth" in args
                                     else ""), st)] += 1
                first = err.split("\n", 1)[0]
                # The message without the file name and numbers: its kind.
                shape = "".join("#" if c.isdigit() else c
                                for c in first.replace(mut, "F"))[:90]
                messages[shape] += 1
                bad = (st == "timeout" or (isinstance(st, int) and st < 0) or
                       "Sanitizer" in err or "runtime error" in err or
                       (st not in (0,) and "\nhelp: " not in err))
                if bad:
                    findings += 1
                    name = os.path.join(out, "%s-%d-%s" % (kind, i, args[0]))
                    shutil.copy(mut, name + ".hdf5")
                    with open(name + ".txt", "w") as f:
                        f.write("keel %s\nstatus %s\n%s" % (
                            " ".join(args), st, err))
        print("mutate_hdf5: %d files, %d runs in %s s, %d findings"
              % (i, runs, seconds, findings))
        for (cmd, st), n in sorted(statuses.items(), key=str):
            print("  %-16s exit %-8s %6d" % (cmd, st, n))
        print("  messages (first line, digits as #), most common first:")
        for shape, n in messages.most_common(25):
            print("  %6d  %s" % (n, shape))
        return 1 if findings else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
