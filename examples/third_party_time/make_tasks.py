"""Write tasks.jsonl for the mcp-server-time walkthrough: time conversions between zones without daylight saving
time, so each answer is fixed whatever the date. Deterministic. Run: `python make_tasks.py [N]`."""

import json
import random
import sys
from datetime import datetime, timedelta
from pathlib import Path

# UTC offsets in minutes; none of these zones observes DST.
ZONES = {"Asia/Tokyo": 540, "Asia/Kolkata": 330, "Asia/Shanghai": 480, "UTC": 0, "Asia/Dubai": 240,
         "Africa/Nairobi": 180, "America/Phoenix": -420, "Pacific/Honolulu": -600, "Asia/Kathmandu": 345,
         "Asia/Singapore": 480}


def make(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        src, dst = rng.sample(sorted(ZONES), 2)
        hh, mm = rng.randrange(24), rng.choice([0, 15, 30, 45])
        t = datetime(2000, 1, 1, hh, mm) + timedelta(minutes=ZONES[dst] - ZONES[src])
        rows.append({
            "prompt": f"It is {hh:02d}:{mm:02d} in {src}. What time is it then in {dst}? "
                      "Use the tools, then give the time as HH:MM inside <answer></answer>.",
            "answer": f"{t:%H:%M}",
            "expected_calls": [{"name": "convert_time",
                                "arguments": {"source_timezone": [src], "time": [f"{hh:02d}:{mm:02d}"],
                                              "target_timezone": [dst]}}],
        })
    return rows


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    out = Path(__file__).with_name("tasks.jsonl")
    out.write_text("".join(json.dumps(r) + "\n" for r in make(n)))
    print(f"wrote {n} tasks to {out}")
