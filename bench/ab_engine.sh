#!/usr/bin/env bash
# Before/after timing of two source trees on one GPU, in one call: builds bench_search from
# BEFORE_SRC and from this tree (in parallel), then runs the same sweep with each, alternating
# before/after for ROUNDS rounds so that clock drift weighs on both alike, and prints one line
# per configuration: median over rounds of the host-to-host p50 and of the device-only p50 (µs),
# after/before ratios, and #wrong (every run checks its answers against float64 references).
#
# usage: bench/ab_engine.sh BEFORE_SRC OUTDIR
# env:   AB_N (100k,1M,10M)  AB_D (768)  AB_T (float16,float32)  AB_B (1,64,256)  AB_K (100)
#        ROUNDS (2)  ITERS (20)  BUILD_JOBS (nproc)  VENDOR (.vendor/include of this tree)
#        BUILD_ONLY=1: build both and stop (a later call with the same build folders runs the sweep)
# Build folders: build-ab/before and build-ab/after in this tree (kept between calls).
# JSON lines: OUTDIR/ab.jsonl (bench_search records, tag before-R / after-R); table: OUTDIR/ab.txt.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BEFORE=$(cd "${1:?usage: bench/ab_engine.sh BEFORE_SRC OUTDIR}" && pwd)
OUTDIR=${2:?usage: bench/ab_engine.sh BEFORE_SRC OUTDIR}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
VENDOR=${VENDOR:-$ROOT/.vendor/include}
JOBS=${BUILD_JOBS:-$(nproc)}
N=${AB_N:-100k,1M,10M} D=${AB_D:-768} T=${AB_T:-float16,float32} B=${AB_B:-1,64,256} K=${AB_K:-100}
ROUNDS=${ROUNDS:-2} ITERS=${ITERS:-20}

build() {  # SRC SIDE -> build-ab/SIDE/bench/bench_search
  local src=$1 side=$2 dir=$ROOT/build-ab/$2
  if [[ ! -x "$dir/bench/bench_search" ]]; then
    cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHARDTOPK_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DSHARDTOPK_TESTS=OFF -DSHARDTOPK_VENDOR_DIR="$VENDOR" >"$OUTDIR/$side.configure.log" 2>&1
    cmake --build "$dir" -j "$JOBS" --target bench_search >"$OUTDIR/$side.build.log" 2>&1
  fi
}
t0=$(date +%s)
build "$BEFORE" before & pb=$!
build "$ROOT" after & pa=$!
wait $pb || { echo "before: build failed"; tail -20 "$OUTDIR/before.build.log"; exit 1; }
wait $pa || { echo "after: build failed"; tail -20 "$OUTDIR/after.build.log"; exit 1; }
echo "# builds done in $(( $(date +%s) - t0 )) s"
[[ "${BUILD_ONLY:-0}" == 1 ]] && exit 0

JL=$OUTDIR/ab.jsonl
for r in $(seq 1 "$ROUNDS"); do
  for side in before after; do
    "$ROOT/build-ab/$side/bench/bench_search" -N "$N" -d "$D" -t "$T" -k "$K" -B "$B" -n "$ITERS" -w 5 -c 1 \
      --check-queries 4 -m inner_product -J "$JL" --tag "$side-$r" >"$OUTDIR/$side-$r.log" 2>&1 ||
      { echo "$side round $r: bench_search failed"; tail -5 "$OUTDIR/$side-$r.log"; exit 1; }
    echo "# $side round $r done ($(( $(date +%s) - t0 )) s)"
  done
done

python3 - "$JL" <<'EOF' | tee "$OUTDIR/ab.txt"
import json, sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    side = r["tag"].split("-")[0]
    key = (r.get("rows", r.get("rows_total")), r["dtype"], r["batch"], r["k"])
    rows.setdefault(key, {}).setdefault(side, []).append(r)
print("# after/before on one GPU, median over rounds of each run's p50 (us); ratio > 1: after is slower")
print("%10s %8s %5s %5s %11s %11s %7s %11s %11s %7s %6s" % ("N", "dtype", "B", "K", "h2h_before", "h2h_after",
      "ratio", "dev_before", "dev_after", "ratio", "#wrong"))
worst = 0.0
for key in sorted(rows):
    s = rows[key]
    if "before" not in s or "after" not in s:
        continue
    def med(side, f):
        v = [x[f] for x in s[side] if x.get(f) is not None]
        return st.median(v) * 1e3 if v else float("nan")
    hb, ha = med("before", "p50_ms"), med("after", "p50_ms")
    db, da = med("before", "dev_p50_ms"), med("after", "dev_p50_ms")
    wrong = sum(int(x.get("wrong", 0) or 0) for side in s for x in s[side])
    worst = max(worst, ha / hb)
    print("%10d %8s %5d %5d %11.1f %11.1f %7.3f %11.1f %11.1f %7.3f %6d" % (key[0], key[1], key[2], key[3], hb, ha,
          ha / hb, db, da, da / db if db == db and db > 0 else float("nan"), wrong))
print("# worst host-to-host ratio: %.3f" % worst)
EOF
