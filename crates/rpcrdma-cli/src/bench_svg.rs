//! The `--sweep` chart: hand-written SVG, two panels sharing a log₂ x axis
//! (payload size): throughput (MB/s) on top, p50 latency (µs) below, one
//! polyline per series in each panel, so the size at which a transport
//! switches strategy (inline → chunks) shows as a knee.

use std::fmt::Write as _;

use super::report::fmt_size;

/// One measured point of a sweep.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SweepPoint {
    /// Payload size in octets.
    pub size: u64,
    /// Throughput, MB/s (10^6 octets).
    pub mb_per_sec: f64,
    /// Median latency, µs.
    pub p50_us: f64,
}

/// A named line (e.g. "tcp read").
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points, any order (drawn sorted by size).
    pub points: Vec<SweepPoint>,
}

const WIDTH: f64 = 760.0;
const PANEL_H: f64 = 240.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 160.0;
const TOP: f64 = 50.0;
const GAP: f64 = 60.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" upper bound (1, 2 or 5 × 10^k) at or above `v`, and its tick step.
fn nice_axis(v: f64) -> (f64, f64) {
    if !(v.is_finite() && v > 0.0) {
        return (1.0, 0.25);
    }
    let raw_step = v / 4.0;
    let mag = 10f64.powf(raw_step.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| s * 4.0 >= v)
        .unwrap_or(10.0 * mag);
    (step * (v / step).ceil().max(1.0), step)
}

fn fmt_num(v: f64) -> String {
    if v >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Renders the chart. `series` with no points are listed in the legend only.
pub fn render_chart(title: &str, series: &[Series]) -> String {
    let sizes: Vec<u64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.size.max(1)))
        .collect();
    let lo = sizes.iter().copied().min().unwrap_or(1) as f64;
    let hi = sizes.iter().copied().max().unwrap_or(1) as f64;
    let (mut x0, mut x1) = (lo.log2().floor(), hi.log2().ceil());
    if x1 <= x0 {
        x0 -= 1.0;
        x1 += 1.0;
    }
    let plot_w = WIDTH - LEFT - RIGHT;
    let xpos = |size: u64| LEFT + ((size.max(1) as f64).log2() - x0) / (x1 - x0) * plot_w;
    let height = TOP + 2.0 * PANEL_H + GAP + 50.0;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">
<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="white"/>
<text x="{}" y="24" font-size="16" text-anchor="middle">{}</text>"#,
        WIDTH / 2.0,
        esc(title)
    );

    type Metric = fn(&SweepPoint) -> f64;
    let panels: [(&str, &str, Metric); 2] = [
        ("throughput", "throughput (MB/s)", |p| p.mb_per_sec),
        ("p50", "p50 latency (µs)", |p| p.p50_us),
    ];
    for (pi, (metric, label, get)) in panels.iter().enumerate() {
        let top = TOP + pi as f64 * (PANEL_H + GAP);
        let bottom = top + PANEL_H;
        let ymax_raw = series
            .iter()
            .flat_map(|s| s.points.iter().map(get))
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max);
        let (ymax, ystep) = nice_axis(ymax_raw * 1.05);
        let ypos = |v: f64| bottom - (v.max(0.0) / ymax).min(1.0) * PANEL_H;
        let _ = writeln!(
            s,
            r##"<g class="panel" data-metric="{metric}">
<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{PANEL_H}" fill="none" stroke="#888"/>
<text x="18" y="{}" transform="rotate(-90 18 {})" text-anchor="middle">{}</text>"##,
            top + PANEL_H / 2.0,
            top + PANEL_H / 2.0,
            esc(label)
        );
        // y grid and labels
        let mut v = 0.0;
        while v <= ymax + ystep * 1e-9 {
            let y = ypos(v);
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + plot_w,
                LEFT - 6.0,
                y + 4.0,
                fmt_num(v)
            );
            v += ystep;
        }
        // x grid: powers of two, labelled every `every`-th.
        let n = (x1 - x0) as u32;
        let every = n.div_ceil(10).max(1);
        for k in 0..=n {
            let e = x0 as u32 + k;
            let size = 1u64 << e.min(62);
            let x = xpos(size);
            let _ = write!(
                s,
                r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{bottom}" stroke="#eee"/>"##
            );
            if k % every == 0 {
                let _ = write!(
                    s,
                    r#"<text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"#,
                    bottom + 16.0,
                    fmt_size(size)
                );
            }
            s.push('\n');
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">payload size (octets, log scale)</text>"#,
            LEFT + plot_w / 2.0,
            bottom + 32.0
        );
        for (si, ser) in series.iter().enumerate() {
            if ser.points.is_empty() {
                continue;
            }
            let color = COLORS[si % COLORS.len()];
            let mut pts = ser.points.clone();
            pts.sort_by_key(|p| p.size);
            let coords: Vec<String> = pts
                .iter()
                .map(|p| format!("{:.1},{:.1}", xpos(p.size), ypos(get(p))))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline class="series" data-series="{}" data-metric="{metric}" fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
                esc(&ser.name),
                coords.join(" ")
            );
            for p in &pts {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"><title>{} {}: {}</title></circle>"#,
                    xpos(p.size),
                    ypos(get(p)),
                    esc(&ser.name),
                    fmt_size(p.size),
                    fmt_num(get(p))
                );
            }
        }
        s.push_str("</g>\n");
    }
    // legend
    for (si, ser) in series.iter().enumerate() {
        let color = COLORS[si % COLORS.len()];
        let y = TOP + 10.0 + si as f64 * 18.0;
        let x = WIDTH - RIGHT + 14.0;
        let _ = writeln!(
            s,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            x + 20.0,
            x + 26.0,
            y + 4.0,
            esc(&ser.name)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(size: u64, mb: f64, p50: f64) -> SweepPoint {
        SweepPoint {
            size,
            mb_per_sec: mb,
            p50_us: p50,
        }
    }

    fn polylines(doc: &roxmltree::Document<'_>) -> Vec<(String, String, usize)> {
        doc.descendants()
            .filter(|n| n.has_tag_name("polyline"))
            .map(|n| {
                (
                    n.attribute("data-series").unwrap_or("").to_string(),
                    n.attribute("data-metric").unwrap_or("").to_string(),
                    n.attribute("points").unwrap_or("").split(' ').count(),
                )
            })
            .collect()
    }

    #[test]
    fn chart_parses_with_expected_series() {
        let series = vec![
            Series {
                name: "tcp read".into(),
                points: vec![
                    pt(1 << 20, 3000.0, 300.0),
                    pt(1024, 50.0, 20.0),
                    pt(4096, 180.0, 22.0),
                ],
            },
            Series {
                name: "rdma <read> & co".into(), // escaped
                points: vec![pt(1024, 60.0, 15.0), pt(1 << 20, 4000.0, 250.0)],
            },
        ];
        let svg = render_chart("sweep \"read\" <test>", &series);
        let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let lines = polylines(&doc);
        // two panels × two series
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert_eq!(lines.iter().filter(|l| l.1 == "throughput").count(), 2);
        assert_eq!(lines.iter().filter(|l| l.1 == "p50").count(), 2);
        assert!(lines.contains(&("tcp read".into(), "throughput".into(), 3)));
        assert!(lines.contains(&("rdma <read> & co".into(), "p50".into(), 2)));
        let circles = doc
            .descendants()
            .filter(|n| n.has_tag_name("circle"))
            .count();
        assert_eq!(circles, 2 * (3 + 2));
        // x increases with size (log scale): 1K < 4K < 1M along the polyline.
        let tp = doc
            .descendants()
            .find(|n| n.attribute("data-series") == Some("tcp read"))
            .unwrap();
        let xs: Vec<f64> = tp
            .attribute("points")
            .unwrap()
            .split(' ')
            .map(|p| p.split(',').next().unwrap().parse().unwrap())
            .collect();
        assert!(xs[0] < xs[1] && xs[1] < xs[2], "{xs:?}");
        // log-x: 1K→4K is 2 octaves, 4K→1M is 8: spacing ratio 1:4.
        let r = (xs[2] - xs[1]) / (xs[1] - xs[0]);
        assert!((r - 4.0).abs() < 0.05, "{r}");
        // axis labels are present
        let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
        assert!(texts.contains(&"1K") && texts.contains(&"1M"), "{texts:?}");
    }

    #[test]
    fn single_point_and_empty_series() {
        let svg = render_chart(
            "one",
            &[
                Series {
                    name: "a".into(),
                    points: vec![pt(4096, 1.0, 1.0)],
                },
                Series {
                    name: "b".into(),
                    points: vec![],
                },
            ],
        );
        let doc = roxmltree::Document::parse(&svg).unwrap();
        assert_eq!(polylines(&doc).len(), 2);
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        let svg = render_chart("none", &[]);
        roxmltree::Document::parse(&svg).unwrap();
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn nice_axes() {
        assert_eq!(nice_axis(3.7), (4.0, 1.0));
        assert_eq!(nice_axis(950.0), (1000.0, 250.0));
        assert_eq!(nice_axis(0.0), (1.0, 0.25));
        let (m, st) = nice_axis(4321.0);
        assert!(m >= 4321.0 && st > 0.0 && m / st <= 5.0);
    }
}
