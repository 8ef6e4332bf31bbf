from conftest import run, warm


def test_demo_builds_loads_and_summarises(tmp_path):
  out = run([warm("python"), "-m", "imagesets.cli.demo", "--config", "tiny",
             "--data_dir", str(tmp_path), "--batch_size", "5"]).stdout
  assert "batch: image (5, 32, 32, 3) uint8, label (5,) int64" in out
  # The build's summaries: 16 seeded random images, all different, none flagged; its page.
  prepared = [line for line in out.splitlines() if line.startswith("prepared ")]
  assert len(prepared) == 1 and prepared[0].endswith(
      f" s); duplicates: none among 16 images; no quality findings; its page: "
      f"{tmp_path}/synthetic_images/tiny/1.0.0/report.html")
  assert (tmp_path / "synthetic_images" / "tiny" / "1.0.0" / "report.html").is_file()
  histogram = out.split("label histogram (train, 12 images): ")[1].splitlines()[0]
  assert sum(int(item.split(":")[1]) for item in histogram.split()) == 12
  assert "images/s" in out
