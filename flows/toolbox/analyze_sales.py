"""Built-in tool `analyze_sales`: revenue trends, segments and regions of a sales CSV.

stdin: {"sales_path": "data/q4-sales.csv"}   columns: date, region, segment, product, revenue,
units (one row per sale or per day and group; `date` is ISO, YYYY-MM-DD).

stdout:
    months          ["2025-10", "2025-11", "2025-12"]
    totals          {"rows", "revenue", "units"}
    top_trends      the 3 products whose monthly revenue moved most, by the size of their
                    average month-over-month growth (a steep decline is a trend too):
                    [{"product", "revenue", "monthly_revenue": {month: revenue},
                      "mom_growth_pct": [..], "avg_mom_growth_pct", "direction"
                      (growing|declining|flat), "summary"}]
    by_segment      [{"segment", "revenue", "share_pct", "units"}], largest first
    by_region       [{"region", "revenue", "share_pct", "vs_average_pct", "monthly_revenue",
                      "mom_growth_pct", "quarter_change_pct"}], largest first
    summary         one sentence per finding
"""

from collections import defaultdict
from datetime import date
from itertools import pairwise

from _common import answer, fail, money, number, params, pct, read_rows

COLUMNS = ("date", "region", "segment", "product", "revenue", "units")


def month_of(text: str, line: int, path: str) -> str:
    try:
        day = date.fromisoformat(text.strip()[:10])
    except ValueError:
        fail(f"{path}: line {line}: date {text!r} is not YYYY-MM-DD")
    return day.strftime("%Y-%m")


def growths(series: list[float]) -> list[float | None]:
    return [pct(new, old) for old, new in pairwise(series)]


def mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(sum(known) / len(known), 1) if known else None


def direction(growth: float | None) -> str:
    if growth is None or abs(growth) < 1.0:
        return "flat"
    return "growing" if growth > 0 else "declining"


def main() -> None:
    path = params()["sales_path"]
    _, rows = read_rows(path, COLUMNS)
    if not rows:
        fail(f"{path}: no rows")

    by_product: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    by_region: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    segment_revenue: dict[str, float] = defaultdict(float)
    segment_units: dict[str, float] = defaultdict(float)
    months: set[str] = set()
    total_revenue = total_units = 0.0
    for line, row in enumerate(rows, start=2):
        month = month_of(row["date"], line, path)
        revenue = number(row, "revenue", line, path)
        units = number(row, "units", line, path)
        months.add(month)
        by_product[row["product"].strip()][month] += revenue
        by_region[row["region"].strip()][month] += revenue
        segment = row["segment"].strip()
        segment_revenue[segment] += revenue
        segment_units[segment] += units
        total_revenue += revenue
        total_units += units
    ordered = sorted(months)

    trends = []
    for product, monthly in by_product.items():
        series = [monthly.get(m, 0.0) for m in ordered]
        steps = growths(series)
        average = mean(steps)
        trend = direction(average)
        summary = (
            f"{product} revenue is flat month over month"
            if trend == "flat"
            else f"{product} revenue is {trend}: {average:+.1f}% month over month on average"
        )
        trends.append(
            {
                "product": product,
                "revenue": money(sum(series)),
                "monthly_revenue": {m: money(v) for m, v in zip(ordered, series, strict=True)},
                "mom_growth_pct": steps,
                "avg_mom_growth_pct": average,
                "direction": trend,
                "summary": summary,
            }
        )
    trends.sort(key=lambda t: (-abs(t["avg_mom_growth_pct"] or 0.0), t["product"]))

    segments = [
        {
            "segment": segment,
            "revenue": money(revenue),
            "share_pct": round(revenue / total_revenue * 100, 1) if total_revenue else 0.0,
            "units": int(segment_units[segment]),
        }
        for segment, revenue in sorted(segment_revenue.items(), key=lambda kv: -kv[1])
    ]

    average_region = total_revenue / len(by_region)
    regions = []
    for region, monthly in by_region.items():
        series = [monthly.get(m, 0.0) for m in ordered]
        revenue = sum(series)
        regions.append(
            {
                "region": region,
                "revenue": money(revenue),
                "share_pct": round(revenue / total_revenue * 100, 1) if total_revenue else 0.0,
                "vs_average_pct": pct(revenue, average_region),
                "monthly_revenue": {m: money(v) for m, v in zip(ordered, series, strict=True)},
                "mom_growth_pct": growths(series),
                "quarter_change_pct": pct(series[-1], series[0]) if len(series) > 1 else None,
            }
        )
    regions.sort(key=lambda r: -r["revenue"])

    top = trends[:3]
    highlights = [t["summary"] for t in top]
    highlights.append(
        f"{segments[0]['segment']} is the largest segment with {segments[0]['share_pct']}% "
        "of revenue"
    )
    highlights.append(
        f"{regions[0]['region']} leads the regions with {regions[0]['share_pct']}% of revenue; "
        f"{regions[-1]['region']} trails with {regions[-1]['share_pct']}%"
    )
    answer(
        {
            "months": ordered,
            "totals": {
                "rows": len(rows),
                "revenue": money(total_revenue),
                "units": int(total_units),
            },
            "top_trends": top,
            "by_segment": segments,
            "by_region": regions,
            "summary": highlights,
        }
    )


if __name__ == "__main__":
    main()
