"""Sample data for the demo: Q4 sales and customer satisfaction, generated, seeded, realistic.

`q4-sales.csv`: one row per day, region, segment and product with revenue and units, with
trends built in (one product grows fast, one declines, regions differ), so the analysis has
real answers to find. `satisfaction.csv`: a survey score (1-5) and response count per region
and segment, loosely tied to how well each one sells.
"""

from __future__ import annotations

import csv
import random
from datetime import date, timedelta
from pathlib import Path

REGIONS = ("North", "South", "East", "West")
SEGMENTS = ("Enterprise", "SMB", "Consumer")
PRODUCTS = {
    # product: (base daily revenue per region and segment, monthly growth, unit price)
    "Analytics Suite": (1800.0, 0.06, 450.0),
    "Cloud Storage": (1200.0, 0.22, 120.0),
    "Security Pack": (900.0, 0.11, 300.0),
    "Support Plan": (1500.0, -0.08, 250.0),
}
REGION_FACTOR = {"North": 1.25, "South": 0.8, "East": 1.05, "West": 0.95}
SEGMENT_FACTOR = {"Enterprise": 1.6, "SMB": 1.0, "Consumer": 0.55}
Q4_START = date(2025, 10, 1)
Q4_DAYS = 92


def write_sales(path: Path, *, seed: int = 4) -> Path:
    """Writes `q4-sales.csv` (date, region, segment, product, revenue, units)."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["date", "region", "segment", "product", "revenue", "units"])
        for day in range(Q4_DAYS):
            when = Q4_START + timedelta(days=day)
            month = when.month - Q4_START.month
            weekend = 0.7 if when.weekday() >= 5 else 1.0
            for region in REGIONS:
                for segment in SEGMENTS:
                    for product, (base, growth, price) in PRODUCTS.items():
                        mean = (
                            base
                            * REGION_FACTOR[region]
                            * SEGMENT_FACTOR[segment]
                            * (1 + growth) ** month
                            * weekend
                        )
                        revenue = max(0.0, rng.gauss(mean, mean * 0.12))
                        units = max(0, round(revenue / price + rng.gauss(0, 0.5)))
                        out.writerow(
                            [when.isoformat(), region, segment, product, f"{revenue:.2f}", units]
                        )
    return path


def write_satisfaction(path: Path, *, seed: int = 4) -> Path:
    """Writes `satisfaction.csv` (region, segment, score, responses)."""
    rng = random.Random(seed + 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["region", "segment", "score", "responses"])
        for region in REGIONS:
            for segment in SEGMENTS:
                strength = REGION_FACTOR[region] * SEGMENT_FACTOR[segment]
                score = min(5.0, max(1.0, 2.9 + 0.9 * strength + rng.gauss(0, 0.2)))
                responses = int(40 + 120 * SEGMENT_FACTOR[segment] + rng.randint(0, 30))
                out.writerow([region, segment, f"{score:.2f}", responses])
    return path


def write_all(folder: Path, *, seed: int = 4) -> tuple[Path, Path]:
    """Writes both files into `folder`; returns their paths (sales, satisfaction)."""
    return (
        write_sales(folder / "q4-sales.csv", seed=seed),
        write_satisfaction(folder / "satisfaction.csv", seed=seed),
    )
