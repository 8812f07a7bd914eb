//! Small hand-written SVG charts: line and step charts, grouped bar charts,
//! with axes, ticks, axis labels, a legend and dashed reference lines.
//!
//! Output is a self-contained `<svg>` element (no fonts, scripts or links):
//! text uses the generic `sans-serif` family and its width is estimated from
//! the character count, generously, so that labels never overlap.

use std::fmt::Write;

/// Chart width in pixels.
pub const WIDTH: f64 = 620.0;
/// Height of the plot area in pixels.
const PLOT_H: f64 = 210.0;
const FONT: f64 = 12.0;
/// Estimated advance of one character at [`FONT`] px (wide, to be safe).
const CHAR_W: f64 = 7.0;
const LEGEND_ROW: f64 = 18.0;
const RIGHT: f64 = 18.0;

/// How values map onto an axis.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Scale {
    Linear {
        min: f64,
        max: f64,
    },
    /// Base-10 logarithmic; values below `min` are drawn at `min`.
    Log {
        min: f64,
        max: f64,
    },
}

/// An axis: its label (with the unit), scale and labelled ticks.
#[derive(Clone, Debug)]
pub struct Axis {
    pub label: String,
    pub scale: Scale,
    pub ticks: Vec<(f64, String)>,
}

impl Axis {
    /// A linear axis from `min` to `max` rounded up to a round step, with
    /// about six ticks labelled by `fmt`.
    pub fn linear(label: impl Into<String>, min: f64, max: f64, fmt: impl Fn(f64) -> String) -> Axis {
        let max = if max > min { max } else { min + 1.0 };
        let step = nice_step(max - min, 5);
        let top = min + ((max - min) / step - 1e-9).ceil() * step;
        let ticks = (0..).map(|i| min + i as f64 * step).take_while(|v| *v <= top + step * 1e-6);
        Axis {
            label: label.into(),
            scale: Scale::Linear { min, max: top },
            ticks: ticks.map(|v| (v, fmt(v))).collect(),
        }
    }

    /// A linear axis with a fixed range and the given tick step.
    pub fn fixed(label: impl Into<String>, min: f64, max: f64, step: f64, fmt: impl Fn(f64) -> String) -> Axis {
        let ticks = (0..).map(|i| min + i as f64 * step).take_while(|v| *v <= max + step * 1e-6);
        Axis { label: label.into(), scale: Scale::Linear { min, max }, ticks: ticks.map(|v| (v, fmt(v))).collect() }
    }

    /// Time in days over `[0, horizon_s]`; steps of whole weeks for long runs.
    pub fn days(horizon_s: u64) -> Axis {
        let days = (horizon_s as f64 / 86_400.0).max(1.0 / 24.0);
        let step = if days > 21.0 {
            let weeks = [1.0, 2.0, 4.0, 8.0, 13.0, 26.0, 52.0].into_iter().find(|w| days / (7.0 * w) <= 7.0);
            7.0 * weeks.unwrap_or((days / 49.0).ceil())
        } else if days >= 3.0 {
            if days <= 10.0 { 1.0 } else { 2.0 }
        } else {
            nice_step(days, 6)
        };
        let ticks = (0..).map(|i| i as f64 * step).take_while(|v| *v <= days + 1e-9);
        Axis {
            label: "time (days)".into(),
            scale: Scale::Linear { min: 0.0, max: days },
            ticks: ticks.map(|v| (v, fmt_num(v))).collect(),
        }
    }

    /// Durations on a log scale from 1 s to the first round duration at or
    /// above `max_s` (at least 1 minute).
    pub fn log_duration(label: impl Into<String>, max_s: f64) -> Axis {
        const TICKS: [(f64, &str); 11] = [
            (1.0, "1s"),
            (10.0, "10s"),
            (60.0, "1m"),
            (600.0, "10m"),
            (3600.0, "1h"),
            (21_600.0, "6h"),
            (86_400.0, "1d"),
            (604_800.0, "7d"),
            (2_592_000.0, "30d"),
            (7_776_000.0, "90d"),
            (31_536_000.0, "365d"),
        ];
        let top = TICKS.iter().map(|t| t.0).find(|t| *t >= max_s.max(60.0)).unwrap_or(max_s);
        let ticks = TICKS.iter().filter(|t| t.0 <= top).map(|(v, l)| (*v, l.to_string())).collect();
        Axis { label: label.into(), scale: Scale::Log { min: 1.0, max: top }, ticks }
    }

    /// Position of `v` along the axis, 0 at the start and 1 at the end (clamped).
    fn frac(&self, v: f64) -> f64 {
        let f = match self.scale {
            Scale::Linear { min, max } => (v - min) / (max - min),
            Scale::Log { min, max } => (v.max(min).log10() - min.log10()) / (max.log10() - min.log10()),
        };
        if f.is_finite() { f.clamp(0.0, 1.0) } else { 0.0 }
    }
}

/// A step of 1, 2, 2.5 or 5 × 10^k giving about `target` intervals.
pub fn nice_step(range: f64, target: usize) -> f64 {
    if range <= 0.0 || !range.is_finite() {
        return 1.0;
    }
    let raw = range / target as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let r = raw / mag;
    let m = [1.0, 2.0, 2.5, 5.0, 10.0].into_iter().find(|m| r <= *m + 1e-9).unwrap_or(10.0);
    m * mag
}

/// A number without trailing zeros (at most 3 decimals), with thousands
/// separators: `0.25`, `7`, `12,000`.
pub fn fmt_num(v: f64) -> String {
    if v.abs() >= 1000.0 || v.fract().abs() < 1e-9 {
        let s = format!("{:.0}", v.abs());
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        return if v < 0.0 { format!("-{out}") } else { out };
    }
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A duration, compact: `45s`, `12m05s`, `3h07m`, `2d04h`; whole units
/// lose their zero remainder (`10m`, `6h`, `7d`).
pub fn fmt_duration(s: u64) -> String {
    let (big, small, bs, ss) = match s {
        0..60 => return format!("{s}s"),
        60..3600 => (s / 60, s % 60, "m", "s"),
        3600..86_400 => (s / 3600, s % 3600 / 60, "h", "m"),
        _ => (s / 86_400, s % 86_400 / 3600, "d", "h"),
    };
    if small == 0 { format!("{big}{bs}") } else { format!("{big}{bs}{small:02}{ss}") }
}

/// How a line joins its points.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Straight segments.
    Line,
    /// Each value holds until the next point (horizontal, then vertical).
    Step,
}

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Line {
    pub name: String,
    pub color: String,
    pub points: Vec<(f64, f64)>,
    pub shape: Shape,
    pub dashed: bool,
}

/// A dashed horizontal reference line with a label.
#[derive(Clone, Debug)]
pub struct Rule {
    pub value: f64,
    pub label: String,
}

/// A line or step chart.
#[derive(Clone, Debug)]
pub struct LineChart {
    pub id: String,
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub lines: Vec<Line>,
    pub rules: Vec<Rule>,
    /// Shown in the plot area when there is nothing to draw.
    pub empty_note: Option<String>,
}

/// One series of a bar chart: a value per category (`None`: no bar).
#[derive(Clone, Debug)]
pub struct Bars {
    pub name: String,
    pub color: String,
    pub values: Vec<Option<f64>>,
}

/// A grouped bar chart: one group per category, one bar per series.
#[derive(Clone, Debug)]
pub struct BarChart {
    pub id: String,
    pub title: String,
    pub x_label: String,
    pub y: Axis,
    pub categories: Vec<String>,
    pub bars: Vec<Bars>,
    /// Writes each bar's value above it, when it fits.
    pub value_label: Option<fn(f64) -> String>,
    pub rules: Vec<Rule>,
    pub empty_note: Option<String>,
}

/// Escapes text for XML content and attributes.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

fn text_w(s: &str) -> f64 {
    s.chars().count() as f64 * CHAR_W
}

/// How a legend entry is drawn.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Swatch {
    Line,
    Bar,
    /// A dashed reference line.
    Rule,
}

/// A legend entry: name, colour, swatch.
type Item = (String, String, Swatch);

/// The legend of a chart: its series, then its reference lines.
fn legend_items(series: impl Iterator<Item = (String, String)>, swatch: Swatch, rules: &[Rule]) -> Vec<Item> {
    let mut items: Vec<Item> = series.map(|(n, c)| (n, c, swatch)).collect();
    items.extend(rules.iter().map(|r| (r.label.clone(), RULE_COLOR.to_string(), Swatch::Rule)));
    items
}

const RULE_COLOR: &str = "#333";

/// The frame every chart shares: title, legend, plot area and axes.
struct Frame {
    left: f64,
    top: f64,
    plot_w: f64,
    height: f64,
    legend: Vec<Vec<Item>>,
}

impl Frame {
    /// Lays out a chart whose legend shows `items` and whose y ticks read
    /// `y_ticks`; `extra_bottom` for rotated category labels.
    fn new(items: &[Item], y_ticks: &[(f64, String)], extra_bottom: f64) -> Frame {
        let tick_w = y_ticks.iter().map(|t| text_w(&t.1)).fold(0.0, f64::max);
        let left = (30.0 + tick_w + 8.0).max(56.0);
        // Legend rows: items left to right, wrapping at the chart's width.
        let mut legend: Vec<Vec<Item>> = vec![Vec::new()];
        let mut x = 12.0;
        for it in items {
            let w = 26.0 + text_w(&it.0) + 16.0;
            if x + w > WIDTH - 8.0 && !legend.last().expect("a row").is_empty() {
                legend.push(Vec::new());
                x = 12.0;
            }
            legend.last_mut().expect("a row").push(it.clone());
            x += w;
        }
        let rows = if items.is_empty() { 0.0 } else { legend.len() as f64 };
        let top = 34.0 + rows * LEGEND_ROW + 10.0;
        let height = top + PLOT_H + 44.0 + extra_bottom;
        Frame { left, top, plot_w: WIDTH - left - RIGHT, height, legend }
    }

    fn bottom(&self) -> f64 {
        self.top + PLOT_H
    }

    fn x(&self, axis: &Axis, v: f64) -> f64 {
        self.left + axis.frac(v) * self.plot_w
    }

    fn y(&self, axis: &Axis, v: f64) -> f64 {
        self.bottom() - axis.frac(v) * PLOT_H
    }

    /// Opens the `<svg>` and draws the title, legend, y axis and grid.
    fn open(&self, s: &mut String, id: &str, title: &str, y: &Axis) {
        let _ = write!(
            s,
            r#"<svg id="{id}" class="chart" width="{WIDTH}" height="{h:.0}" viewBox="0 0 {WIDTH} {h:.0}" role="img" aria-label="{t}" font-family="sans-serif" font-size="{FONT}">"#,
            id = esc(id),
            h = self.height,
            t = esc(title),
        );
        let _ = write!(s, r##"<rect width="{WIDTH}" height="{:.0}" fill="#fff"/>"##, self.height);
        let _ =
            write!(s, r##"<text x="12" y="20" font-size="15" font-weight="bold" fill="#222">{}</text>"##, esc(title));
        for (r, row) in self.legend.iter().enumerate() {
            let ly = 34.0 + r as f64 * LEGEND_ROW + 9.0;
            let mut x = 12.0;
            for (name, color, swatch) in row {
                let (x2, yl) = (x + 18.0, ly - 4.0);
                let _ = match swatch {
                    Swatch::Bar => {
                        write!(s, r#"<rect x="{x}" y="{:.1}" width="18" height="10" fill="{color}"/>"#, ly - 8.0)
                    }
                    Swatch::Line => write!(
                        s,
                        r#"<line x1="{x}" y1="{yl:.1}" x2="{x2:.1}" y2="{yl:.1}" stroke="{color}" stroke-width="3"/>"#
                    ),
                    Swatch::Rule => write!(
                        s,
                        r#"<line x1="{x}" y1="{yl:.1}" x2="{x2:.1}" y2="{yl:.1}" stroke="{color}" stroke-width="1.5" stroke-dasharray="5 3"/>"#
                    ),
                };
                let _ = write!(s, r##"<text x="{:.1}" y="{ly:.1}" fill="#222">{}</text>"##, x + 24.0, esc(name));
                x += 26.0 + text_w(name) + 16.0;
            }
        }
        // Horizontal grid and y ticks.
        for (v, label) in &y.ticks {
            let py = self.y(y, *v);
            let _ = write!(
                s,
                r##"<line x1="{:.1}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#e3e3e3"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#444">{}</text>"##,
                self.left,
                self.left + self.plot_w,
                self.left - 6.0,
                py + 4.0,
                esc(label)
            );
        }
        let cy = self.top + PLOT_H / 2.0;
        let _ = write!(
            s,
            r##"<text x="14" y="{cy:.1}" transform="rotate(-90 14 {cy:.1})" text-anchor="middle" fill="#222">{}</text>"##,
            esc(&y.label)
        );
    }

    /// Draws the x-axis label and the plot's border, and closes the `<svg>`.
    fn close(&self, s: &mut String, x_label: &str, extra_bottom: f64) {
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{PLOT_H}" fill="none" stroke="#888"/>"##,
            self.left, self.top, self.plot_w
        );
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#222">{}</text></svg>"##,
            self.left + self.plot_w / 2.0,
            self.bottom() + 36.0 + extra_bottom,
            esc(x_label)
        );
    }

    /// Draws the reference lines (their labels are in the legend).
    fn rules(&self, s: &mut String, y: &Axis, rules: &[Rule]) {
        for r in rules {
            let py = self.y(y, r.value);
            let _ = write!(
                s,
                r#"<line x1="{:.1}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="{RULE_COLOR}" stroke-width="1.5" stroke-dasharray="6 4"><title>{}</title></line>"#,
                self.left,
                self.left + self.plot_w,
                esc(&r.label)
            );
        }
    }

    fn note(&self, s: &mut String, note: &str) {
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#666">{}</text>"##,
            self.left + self.plot_w / 2.0,
            self.top + PLOT_H / 2.0,
            esc(note)
        );
    }
}

/// Renders a line or step chart.
pub fn line_chart(c: &LineChart) -> String {
    let items = legend_items(c.lines.iter().map(|l| (l.name.clone(), l.color.clone())), Swatch::Line, &c.rules);
    let f = Frame::new(&items, &c.y.ticks, 0.0);
    let mut s = String::new();
    f.open(&mut s, &c.id, &c.title, &c.y);
    for (v, label) in &c.x.ticks {
        let px = f.x(&c.x, *v);
        let _ = write!(
            s,
            r##"<line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="#e3e3e3"/><text x="{px:.1}" y="{:.1}" text-anchor="middle" fill="#444">{}</text>"##,
            f.top,
            f.bottom(),
            f.bottom() + 16.0,
            esc(label)
        );
    }
    let clip = format!("{}-clip", c.id);
    let _ = write!(
        s,
        r#"<clipPath id="{}"><rect x="{:.1}" y="{:.1}" width="{:.1}" height="{PLOT_H}"/></clipPath>"#,
        esc(&clip),
        f.left,
        f.top - 2.0,
        f.plot_w
    );
    for l in c.lines.iter().filter(|l| !l.points.is_empty()) {
        let mut d = String::new();
        for (i, &(x, y)) in l.points.iter().enumerate() {
            let (px, py) = (f.x(&c.x, x), f.y(&c.y, y));
            match (i, l.shape) {
                (0, _) => {
                    let _ = write!(d, "M{px:.1} {py:.1}");
                }
                (_, Shape::Line) => {
                    let _ = write!(d, "L{px:.1} {py:.1}");
                }
                (_, Shape::Step) => {
                    let _ = write!(d, "H{px:.1}V{py:.1}");
                }
            }
        }
        let dash = if l.dashed { r#" stroke-dasharray="5 3""# } else { "" };
        let _ = write!(
            s,
            r#"<path d="{d}" fill="none" stroke="{}" stroke-width="1.8" stroke-linejoin="round"{dash} clip-path="url(#{})"><title>{}</title></path>"#,
            l.color,
            esc(&clip),
            esc(&l.name)
        );
    }
    f.rules(&mut s, &c.y, &c.rules);
    if let Some(n) = &c.empty_note {
        f.note(&mut s, n);
    }
    f.close(&mut s, &c.x.label, 0.0);
    s
}

/// Renders a grouped bar chart.
pub fn bar_chart(c: &BarChart) -> String {
    let items = legend_items(c.bars.iter().map(|b| (b.name.clone(), b.color.clone())), Swatch::Bar, &c.rules);
    let n = c.categories.len().max(1) as f64;
    let probe = Frame::new(&items, &c.y.ticks, 0.0);
    let cat_w = probe.plot_w / n;
    let label_w = c.categories.iter().map(|l| text_w(l)).fold(0.0, f64::max);
    let rotate = label_w > cat_w - 6.0;
    let extra = if rotate { label_w * 0.5 + 4.0 } else { 0.0 };
    let f = Frame::new(&items, &c.y.ticks, extra);
    let mut s = String::new();
    f.open(&mut s, &c.id, &c.title, &c.y);
    let group_w = cat_w * 0.8;
    let bar_w = group_w / c.bars.len().max(1) as f64;
    let rule_ys: Vec<f64> = c.rules.iter().map(|r| f.y(&c.y, r.value)).collect();
    for (ci, cat) in c.categories.iter().enumerate() {
        let cx = f.left + cat_w * (ci as f64 + 0.5);
        let ty = f.bottom() + 16.0;
        if rotate {
            let _ = write!(
                s,
                r##"<text x="{cx:.1}" y="{ty:.1}" transform="rotate(-30 {cx:.1} {ty:.1})" text-anchor="end" fill="#444">{}</text>"##,
                esc(cat)
            );
        } else {
            let _ =
                write!(s, r##"<text x="{cx:.1}" y="{ty:.1}" text-anchor="middle" fill="#444">{}</text>"##, esc(cat));
        }
        for (bi, b) in c.bars.iter().enumerate() {
            let Some(v) = b.values.get(ci).copied().flatten() else { continue };
            let x = cx - group_w / 2.0 + bar_w * bi as f64;
            let (y0, y1) = (f.y(&c.y, 0.0), f.y(&c.y, v));
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                x + 1.0,
                y1.min(y0),
                (bar_w - 2.0).max(1.0),
                (y0 - y1).abs(),
                b.color,
                esc(&b.name),
                esc(&fmt_num(v))
            );
            let label = c.value_label.map(|fmt| fmt(v)).filter(|l| text_w(l) * 0.85 + 4.0 <= bar_w);
            let place = label_place(y1.min(y0), y0.max(y1), f.top, &rule_ys);
            if let (Some(label), Some((ly, inside))) = (label, place) {
                let fill = if inside { "#fff" } else { "#222" };
                let _ = write!(
                    s,
                    r##"<text x="{:.1}" y="{ly:.1}" text-anchor="middle" font-size="10" fill="{fill}">{}</text>"##,
                    x + bar_w / 2.0,
                    esc(&label)
                );
            }
        }
    }
    f.rules(&mut s, &c.y, &c.rules);
    if let Some(note) = &c.empty_note {
        f.note(&mut s, note);
    }
    f.close(&mut s, &c.x_label, extra);
    s
}

/// Height of a bar's value label (10 px text: 10 above the baseline, 2
/// below) and the gap it keeps from the bar and the reference lines.
const LABEL_ASCENT: f64 = 10.0;
const LABEL_DESCENT: f64 = 2.0;
const LABEL_GAP: f64 = 2.0;

/// Where a bar's value label goes: the baseline `y` and whether it is
/// inside the bar (white on the bar's colour). The label is above the bar
/// if it fits below the plot's top (`top`) without crossing a reference
/// line (at `rules`), else just inside the bar's top when the bar is tall
/// enough, else above or below the reference line that was in the way
/// (still over the bar); `None` when nowhere fits, and the bar goes
/// unlabelled rather than clipped or crossed by a line.
fn label_place(bar_top: f64, bar_bottom: f64, top: f64, rules: &[f64]) -> Option<(f64, bool)> {
    let clear = |y: f64| rules.iter().all(|r| *r < y - LABEL_ASCENT - LABEL_GAP || *r > y + LABEL_DESCENT + LABEL_GAP);
    let fits = |y: f64| y - LABEL_ASCENT >= top + 1.0 && clear(y);
    let above = bar_top - LABEL_GAP - LABEL_DESCENT;
    if fits(above) {
        return Some((above, false));
    }
    let inside = bar_top + LABEL_GAP + LABEL_ASCENT;
    if inside + LABEL_DESCENT + LABEL_GAP <= bar_bottom && fits(inside) {
        return Some((inside, true));
    }
    rules
        .iter()
        .flat_map(|r| [r - LABEL_GAP - LABEL_DESCENT - 1.0, r + LABEL_GAP + LABEL_ASCENT + 1.0])
        .find(|&y| y + LABEL_DESCENT <= bar_top && fits(y))
        .map(|y| (y, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_labels_are_never_clipped_nor_crossed_by_a_line() {
        // (name, bar top, bar bottom, rules, placement).
        type Case = (&'static str, f64, f64, Vec<f64>, Option<(f64, bool)>);
        let cases: Vec<Case> = vec![
            ("room above", 100.0, 250.0, vec![], Some((96.0, false))),
            ("at the top: inside", 42.0, 250.0, vec![], Some((54.0, true))),
            ("short bar at the top: none", 42.0, 50.0, vec![], None),
            ("a line above the bar: inside", 100.0, 250.0, vec![92.0], Some((112.0, true))),
            ("a line through the label, a short bar: above the line", 100.0, 110.0, vec![95.0], Some((90.0, false))),
            ("a line at the bar's top: above the line", 100.0, 250.0, vec![100.0], Some((95.0, false))),
        ];
        for (name, bar_top, bar_bottom, rules, want) in cases {
            let got = label_place(bar_top, bar_bottom, 40.0, &rules);
            assert_eq!(got, want, "{name}");
            if let Some((y, inside)) = got {
                assert!(y - LABEL_ASCENT >= 41.0, "{name}: below the top");
                for r in &rules {
                    assert!(*r < y - LABEL_ASCENT || *r > y + LABEL_DESCENT, "{name}: crossed by {r}");
                }
                if !inside {
                    assert!(y + LABEL_DESCENT <= bar_top, "{name}: over the bar");
                }
            }
        }
    }

    #[test]
    fn nice_steps_and_numbers() {
        let cases = [(1.0, 5, 0.2), (10.0, 5, 2.0), (7.0, 7, 1.0), (1200.0, 5, 250.0), (0.3, 5, 0.1)];
        for (range, target, want) in cases {
            assert!((nice_step(range, target) - want).abs() < 1e-12, "{range}/{target}: {}", nice_step(range, target));
        }
        assert_eq!(fmt_num(0.25), "0.25");
        assert_eq!(fmt_num(7.0), "7");
        assert_eq!(fmt_num(12_000.0), "12,000");
        assert_eq!(fmt_num(1_234_567.0), "1,234,567");
        assert_eq!(fmt_num(0.1 + 0.2), "0.3");
        let durations =
            [(45, "45s"), (600, "10m"), (725, "12m05s"), (21_600, "6h"), (11_220, "3h07m"), (187_200, "2d04h")];
        for (secs, want) in durations {
            assert_eq!(fmt_duration(secs), want);
        }
    }

    #[test]
    fn axes_cover_their_data() {
        let a = Axis::linear("x", 0.0, 0.93, fmt_num);
        assert_eq!(a.scale, Scale::Linear { min: 0.0, max: 1.0 });
        assert_eq!(a.ticks.len(), 6);
        let d = Axis::days(30 * 86_400);
        assert_eq!(d.ticks.iter().map(|t| t.1.as_str()).collect::<Vec<_>>(), ["0", "7", "14", "21", "28"]);
        let l = Axis::log_duration("q", 5000.0);
        assert_eq!(l.scale, Scale::Log { min: 1.0, max: 21_600.0 });
        assert_eq!(l.frac(0.0), 0.0);
        assert_eq!(l.frac(21_600.0), 1.0);
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc(r#"a<b & "c""#), "a&lt;b &amp; &quot;c&quot;");
    }
}
