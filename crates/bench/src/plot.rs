//! `perfvm bench --plot DIR`: one SVG bar chart per suite, legacy next to ours per category,
//! each in every execution mode. Bars are medians with min-max error bars; values spanning
//! orders of magnitude get a logarithmic axis; category labels wrap to their slot and the
//! legend has a column of its own, so no text lands on a bar or on other text.

use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// One bar: the median of the runs, and their min and max.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bar {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

impl Bar {
    /// A measurement without spread.
    pub fn exact(value: f64) -> Bar {
        Bar { value, low: value, high: value }
    }

    fn has_spread(&self) -> bool {
        self.low.is_finite() && self.high.is_finite() && self.high > self.low
    }
}

/// A grouped bar chart: for each category, one bar per series.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    /// (series name, one bar per category), grouped by metric: `modes` consecutive series
    /// are one metric in each execution mode, drawn in one color, lighter for later modes.
    pub series: Vec<(String, Vec<Bar>)>,
    pub modes: usize,
}

const COLORS: [RGBColor; 3] = [RGBColor(0xd6, 0x27, 0x28), RGBColor(0x1f, 0x77, 0xb4), RGBColor(0x2c, 0xa0, 0x2c)];

/// Bars whose largest and smallest positive values are this far apart get a log axis.
const LOG_RATIO: f64 = 100.0;
/// Average width of a 13 px sans-serif character, rounded up, for fitting labels.
const CHAR_PX: u32 = 8;
const LINE_PX: u32 = 16;
const Y_LABEL_AREA: u32 = 90;
const MARGIN: u32 = 14;

/// The value axis.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Axis {
    Linear { top: f64 },
    Log { bottom: f64, top: f64 },
}

impl Chart {
    /// Write the chart as `DIR/<name>.svg`.
    pub fn write(&self, dir: &Path, name: &str) -> Result<std::path::PathBuf, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join(format!("{name}.svg"));
        let mut svg = String::new();
        self.draw(&mut svg).map_err(|e| format!("{}: {e}", path.display()))?;
        perfvm::output::write_file(&path.display().to_string(), svg.as_bytes()).map_err(|e| e.to_string())?;
        Ok(path)
    }

    fn bars(&self) -> impl Iterator<Item = &Bar> {
        self.series.iter().flat_map(|(_, bars)| bars)
    }

    fn axis(&self) -> Axis {
        let ends = self.bars().flat_map(|b| [b.value, b.low, b.high]).filter(|v| v.is_finite());
        let (min_positive, max) =
            ends.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| (if v > 0.0 { lo.min(v) } else { lo }, hi.max(v)));
        if max > 0.0 && max / min_positive >= LOG_RATIO {
            let decade = |v: f64| 10f64.powf(v.log10().floor());
            Axis::Log { bottom: decade(min_positive), top: decade(max) * 10.0 }
        } else {
            Axis::Linear { top: if max > 0.0 { max * 1.1 } else { 1.0 } }
        }
    }

    fn legend_width(&self) -> u32 {
        let longest = self.series.iter().map(|(name, _)| name.chars().count()).max().unwrap_or(0).max(22);
        longest as u32 * CHAR_PX + 40
    }

    fn draw(&self, svg: &mut String) -> Result<(), Box<dyn std::error::Error>> {
        let n = self.categories.len().max(1) as u32;
        let legend = self.legend_width();
        let width = (170 * n + legend + Y_LABEL_AREA).clamp(760, 1900);
        let slot_chars = ((width - legend - Y_LABEL_AREA - 2 * MARGIN) / n / CHAR_PX).saturating_sub(1).max(6);
        let labels: Vec<Vec<String>> = self.categories.iter().map(|c| wrap(c, slot_chars as usize)).collect();
        let rows = labels.iter().map(Vec::len).max().unwrap_or(1) as u32;
        let root = SVGBackend::with_string(svg, (width, 460 + rows * LINE_PX)).into_drawing_area();
        root.fill(&WHITE)?;
        let (plot, legend_area) = root.split_horizontally(width - legend);
        match self.axis() {
            Axis::Linear { top } => self.draw_bars(&plot, 0.0..top, 0.0, &labels)?,
            Axis::Log { bottom, top } => self.draw_bars(&plot, (bottom..top).log_scale(), bottom, &labels)?,
        }
        self.draw_legend(&legend_area)?;
        root.present()?;
        Ok(())
    }

    /// The bars with their error bars on a value axis `y` whose bars start at `floor`.
    fn draw_bars<Y>(
        &self,
        area: &DrawingArea<SVGBackend, Shift>,
        y: Y,
        floor: f64,
        labels: &[Vec<String>],
    ) -> Result<(), Box<dyn std::error::Error>>
    where
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let n = self.categories.len().max(1);
        let rows = labels.iter().map(Vec::len).max().unwrap_or(1) as u32;
        let log = matches!(self.axis(), Axis::Log { .. });
        let mut chart = ChartBuilder::on(area)
            .caption(&self.title, ("sans-serif", 18))
            .margin(MARGIN)
            .x_label_area_size(12 + rows * LINE_PX)
            .y_label_area_size(Y_LABEL_AREA)
            .build_cartesian_2d(0f64..n as f64, y)?;
        let y_desc = if log { format!("{} (log scale)", self.y_label) } else { self.y_label.clone() };
        chart.configure_mesh().disable_x_mesh().x_labels(0).y_label_formatter(&|v| tick(*v)).y_desc(y_desc).draw()?;
        let k = self.series.len().max(1) as f64;
        let width = 0.8 / k;
        for (s, (_, bars)) in self.series.iter().enumerate() {
            let color = self.color(s);
            let x0 = |i: usize| i as f64 + 0.1 + s as f64 * width;
            let drawn = |b: &&Bar| b.value.is_finite() && b.value > floor;
            chart.draw_series(
                bars.iter()
                    .enumerate()
                    .filter(|(_, b)| drawn(b))
                    .map(|(i, b)| Rectangle::new([(x0(i), floor), (x0(i) + width * 0.95, b.value)], color.filled())),
            )?;
            let whisker = BLACK.mix(0.75).stroke_width(1);
            chart.draw_series(bars.iter().enumerate().filter(|(_, b)| b.has_spread()).map(|(i, b)| {
                let clamp = |v: f64| v.max(floor);
                let x = x0(i) + width * 0.475;
                ErrorBar::new_vertical(x, clamp(b.low), clamp(b.value), clamp(b.high), whisker, 6)
            }))?;
        }
        // Category labels, wrapped to their slot, centered under it.
        let style = ("sans-serif", 13).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Top));
        for (i, lines) in labels.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(i as f64 + 0.5, floor));
            for (j, line) in lines.iter().enumerate() {
                area.draw(&Text::new(line.clone(), (x, y + 8 + j as i32 * LINE_PX as i32), style.clone()))?;
            }
        }
        Ok(())
    }

    fn color(&self, series: usize) -> RGBAColor {
        let modes = self.modes.max(1);
        COLORS[(series / modes) % COLORS.len()].mix(1.0 / (1 + series % modes) as f64)
    }

    /// The legend, in its own column: one swatch per series, then what the whiskers mean.
    fn draw_legend(&self, area: &DrawingArea<SVGBackend, Shift>) -> Result<(), Box<dyn std::error::Error>> {
        let font = ("sans-serif", 13).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
        let mut y = 56;
        for (s, (name, _)) in self.series.iter().enumerate() {
            area.draw(&Rectangle::new([(8, y - 6), (20, y + 6)], self.color(s).filled()))?;
            area.draw(&Text::new(name.clone(), (28, y), font.clone()))?;
            y += 22;
        }
        if self.bars().any(Bar::has_spread) {
            let note = ("sans-serif", 11).into_font().color(&BLACK.mix(0.7)).pos(Pos::new(HPos::Left, VPos::Center));
            area.draw(&Text::new("bars: median of the runs;", (8, y + 10), note.clone()))?;
            area.draw(&Text::new("whiskers: their min and max", (8, y + 26), note))?;
        }
        Ok(())
    }
}

/// `text` in lines of at most `max` characters, broken at spaces (a longer word is cut).
fn wrap(text: &str, max: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        while word.len() > max {
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            lines.push(word.drain(..max).collect());
        }
        let word: String = word.into_iter().collect();
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > max {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// An axis tick: 3 significant digits at most, with k/M/G for large values.
fn tick(v: f64) -> String {
    let (scaled, suffix) = [(1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(s, _)| v.abs() >= *s)
        .map_or((v, ""), |(s, p)| (v / s, p));
    let digits = if scaled.abs() >= 100.0 || scaled == scaled.round() {
        0
    } else if scaled.abs() >= 10.0 {
        1
    } else {
        2
    };
    let text = format!("{scaled:.digits$}");
    let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.') } else { &text };
    format!("{text}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(series: Vec<(String, Vec<Bar>)>) -> Chart {
        Chart {
            title: "t".into(),
            y_label: "ns".into(),
            categories: vec!["alpha".into(), "reference: exact, every retired instruction".into()],
            series,
            modes: 1,
        }
    }

    fn svg_of(chart: &Chart, name: &str) -> String {
        let dir = std::env::temp_dir().join(format!("perfvm-plot-{}", std::process::id()));
        std::fs::read_to_string(chart.write(&dir, name).unwrap()).unwrap()
    }

    #[test]
    fn writes_an_svg_with_its_labels_and_error_bars() {
        let c = chart(vec![
            ("legacy".into(), vec![Bar { value: 3.0, low: 2.5, high: 4.0 }, Bar::exact(4.0)]),
            ("reuse".into(), vec![Bar::exact(1.0), Bar::exact(f64::NAN)]),
        ]);
        assert_eq!(c.axis(), Axis::Linear { top: 4.4 });
        let svg = svg_of(&c, "linear");
        assert!(svg.contains("<svg") && svg.contains("alpha") && svg.contains("legacy"), "{svg}");
        assert!(svg.contains("whiskers: their min and max"), "{svg}");
        assert!(!svg.contains("log scale"), "{svg}");
        // The long label is wrapped into its slot, not drawn across the neighbour's.
        assert!(svg.contains("\nreference: exact, every\n") && svg.contains("\nretired instruction\n"), "{svg}");
    }

    #[test]
    fn orders_of_magnitude_get_a_log_axis() {
        let c = chart(vec![("rate".into(), vec![Bar::exact(4.6e9), Bar { value: 1.1e6, low: 1.0e6, high: 1.2e6 }])]);
        assert_eq!(c.axis(), Axis::Log { bottom: 1e6, top: 1e10 });
        let svg = svg_of(&c, "log");
        assert!(svg.contains("ns (log scale)") && svg.contains("\n1G\n") && svg.contains("\n1M\n"), "{svg}");
    }

    #[test]
    fn labels_wrap_and_ticks_are_short() {
        assert_eq!(
            wrap("reference: exact, every retired instruction", 18),
            ["reference: exact,", "every retired", "instruction"]
        );
        assert_eq!(wrap("GLOBAL_CTRL_enable_long", 10), ["GLOBAL_CTR", "L_enable_l", "ong"]);
        assert_eq!(wrap("", 10), [""]);
        assert_eq!(
            (tick(160000.0), tick(1e9), tick(0.05), tick(2.5), tick(12.5)),
            ("160k".into(), "1G".into(), "0.05".into(), "2.5".into(), "12.5".into())
        );
    }
}
