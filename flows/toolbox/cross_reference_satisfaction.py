"""Built-in tool `cross_reference_satisfaction`: does revenue go with customer satisfaction?

stdin: {"sales_path": "data/q4-sales.csv", "satisfaction_path": "data/satisfaction.csv"}
sales columns: region, segment, revenue (others ignored); satisfaction columns: region,
segment, score (1-5), responses.

stdout:
    pairs             [{"region", "segment", "revenue", "score", "responses"}], one per
                      region and segment found in both files
    correlation       {"revenue_vs_score": r, "n", "strength"}: Pearson's r over the pairs
                      (null with fewer than 2 pairs or no spread); strength is e.g.
                      "strong positive", "weak negative", "none"
    by_segment        [{"segment", "revenue", "score", "responses"}]: score is the
                      response-weighted mean; largest revenue first
    by_region         [{"region", "revenue", "score", "responses"}], the same per region
    segment_correlation, region_correlation   {"revenue_vs_score", "n", "strength"}
    unmatched         {"sales_only": ["region/segment", ...], "satisfaction_only": [...]}
    summary           one sentence per finding
"""

import statistics
from collections import defaultdict

from _common import answer, fail, money, number, params, read_rows


def correlation(xs: list[float], ys: list[float]) -> dict:
    r = None
    if len(xs) >= 2:
        try:
            r = round(statistics.correlation(xs, ys), 3)
        except statistics.StatisticsError:
            r = None  # one of the series does not vary
    return {"revenue_vs_score": r, "n": len(xs), "strength": strength(r)}


def strength(r: float | None) -> str:
    if r is None or abs(r) < 0.1:
        return "none"
    size = "weak" if abs(r) < 0.3 else "moderate" if abs(r) < 0.5 else "strong"
    return f"{size} {'positive' if r > 0 else 'negative'}"


def grouped(pairs: list[dict], key: str) -> list[dict]:
    revenue: dict[str, float] = defaultdict(float)
    weighted: dict[str, float] = defaultdict(float)
    responses: dict[str, int] = defaultdict(int)
    for p in pairs:
        revenue[p[key]] += p["revenue"]
        weighted[p[key]] += p["score"] * p["responses"]
        responses[p[key]] += p["responses"]
    groups = [
        {
            key: name,
            "revenue": money(revenue[name]),
            "score": round(weighted[name] / responses[name], 2) if responses[name] else None,
            "responses": responses[name],
        }
        for name in revenue
    ]
    return sorted(groups, key=lambda g: -g["revenue"])


def main() -> None:
    given = params()
    sales_path, survey_path = given["sales_path"], given["satisfaction_path"]
    _, sales = read_rows(sales_path, ("region", "segment", "revenue"))
    _, survey = read_rows(survey_path, ("region", "segment", "score", "responses"))

    revenue: dict[tuple[str, str], float] = defaultdict(float)
    for line, row in enumerate(sales, start=2):
        key = (row["region"].strip(), row["segment"].strip())
        revenue[key] += number(row, "revenue", line, sales_path)
    scores: dict[tuple[str, str], tuple[float, int]] = {}
    for line, row in enumerate(survey, start=2):
        score = number(row, "score", line, survey_path)
        if not 1 <= score <= 5:
            fail(f"{survey_path}: line {line}: score {score:g} is not between 1 and 5")
        responses = int(number(row, "responses", line, survey_path))
        scores[(row["region"].strip(), row["segment"].strip())] = (score, responses)

    both = sorted(set(revenue) & set(scores))
    if not both:
        fail("no region and segment appears in both files")
    pairs = [
        {
            "region": region,
            "segment": segment,
            "revenue": money(revenue[(region, segment)]),
            "score": scores[(region, segment)][0],
            "responses": scores[(region, segment)][1],
        }
        for region, segment in both
    ]
    overall = correlation([p["revenue"] for p in pairs], [p["score"] for p in pairs])
    segments = grouped(pairs, "segment")
    regions = grouped(pairs, "region")
    by_segment = correlation(
        [g["revenue"] for g in segments], [g["score"] or 0.0 for g in segments]
    )
    by_region = correlation([g["revenue"] for g in regions], [g["score"] or 0.0 for g in regions])

    best = max(segments, key=lambda g: g["score"] or 0.0)
    worst = min(segments, key=lambda g: g["score"] or 0.0)
    r = overall["revenue_vs_score"]
    summary = [
        f"revenue and satisfaction show a {overall['strength']} correlation "
        f"(r = {r}, {overall['n']} region/segment pairs)"
        if r is not None
        else "revenue and satisfaction cannot be correlated (too few pairs or no spread)",
        f"{best['segment']} customers are the most satisfied ({best['score']}); "
        f"{worst['segment']} the least ({worst['score']})",
    ]
    answer(
        {
            "pairs": pairs,
            "correlation": overall,
            "by_segment": segments,
            "by_region": regions,
            "segment_correlation": by_segment,
            "region_correlation": by_region,
            "unmatched": {
                "sales_only": [f"{r}/{s}" for r, s in sorted(set(revenue) - set(scores))],
                "satisfaction_only": [f"{r}/{s}" for r, s in sorted(set(scores) - set(revenue))],
            },
            "summary": summary,
        }
    )


if __name__ == "__main__":
    main()
