//! `perfvm bench --plot DIR`: one SVG bar chart per suite, legacy next to ours per category,
//! each in every execution mode.

use plotters::prelude::*;
use std::path::Path;

/// A grouped bar chart: for each category, one bar per series.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    /// (series name, one value per category), grouped by metric: `modes` consecutive series
    /// are one metric in each execution mode, drawn in one color, lighter for later modes.
    pub series: Vec<(String, Vec<f64>)>,
    pub modes: usize,
}

const COLORS: [RGBColor; 3] = [RGBColor(0xd6, 0x27, 0x28), RGBColor(0x1f, 0x77, 0xb4), RGBColor(0x2c, 0xa0, 0x2c)];

impl Chart {
    /// Write the chart as `DIR/<name>.svg`.
    pub fn write(&self, dir: &Path, name: &str) -> Result<std::path::PathBuf, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join(format!("{name}.svg"));
        self.draw(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }

    fn draw(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let n = self.categories.len().max(1);
        let width = (160 * n as u32).clamp(640, 1600);
        let root = SVGBackend::new(path, (width, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        let max =
            self.series.iter().flat_map(|(_, v)| v.iter().copied()).filter(|v| v.is_finite()).fold(0.0f64, f64::max);
        let top = if max > 0.0 { max * 1.15 } else { 1.0 };
        let mut chart = ChartBuilder::on(&root)
            .caption(&self.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(60)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..n as f64, 0f64..top)?;
        let categories = self.categories.clone();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                if (x - i as f64 - 0.5).abs() < 0.26 {
                    categories.get(i).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc(&self.y_label)
            .draw()?;
        let k = self.series.len().max(1) as f64;
        for (s, (name, values)) in self.series.iter().enumerate() {
            let shade = 1.0 / (1 + s % self.modes.max(1)) as f64;
            let color = COLORS[(s / self.modes.max(1)) % COLORS.len()].mix(shade);
            let width = 0.8 / k;
            chart
                .draw_series(values.iter().enumerate().filter(|(_, v)| v.is_finite()).map(|(i, &v)| {
                    let x0 = i as f64 + 0.1 + s as f64 * width;
                    Rectangle::new([(x0, 0.0), (x0 + width * 0.95, v)], color.filled())
                }))?
                .label(name.clone())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        }
        chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
        root.present()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_svg_with_its_labels() {
        let chart = Chart {
            title: "t".into(),
            y_label: "ns".into(),
            categories: vec!["alpha".into(), "beta".into()],
            series: vec![("legacy".into(), vec![3.0, 4.0]), ("reuse".into(), vec![1.0, f64::NAN])],
            modes: 1,
        };
        let dir = std::env::temp_dir().join(format!("perfvm-plot-{}", std::process::id()));
        let path = chart.write(&dir, "x").unwrap();
        let svg = std::fs::read_to_string(path).unwrap();
        assert!(svg.contains("<svg") && svg.contains("alpha") && svg.contains("legacy"));
    }
}
