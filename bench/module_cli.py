"""What the scripts that run the PyTorch module (bench/layer_gaps.py,
bench/module_microbatches.py) share: the moefuse package from this checkout, the command line's
--preset / --tokens / --json, and the JSON they write."""
import argparse
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "python"))


def preset_parser(doc: str, tokens_help: str = "tokens") -> argparse.ArgumentParser:
    """A parser described by the first paragraph of `doc`, with --preset (a name or 'all'),
    --tokens and --json; the script adds its own options."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--preset", default="qwen3-30b-a3b", help="a preset name or 'all'")
    ap.add_argument("--tokens", type=int, default=16384, help=tokens_help)
    ap.add_argument("--json", default="", help="write the results here")
    return ap


def presets(moefuse, preset: str) -> tuple:
    return moefuse.PRESETS if preset == "all" else (preset,)


def write_results(path: str, torch, moefuse, results: list) -> None:
    """The results with the date, the GPU and the moefuse build they were measured on."""
    meta = {"date": time.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(),
            "moefuse": moefuse.version(), "build_commit": moefuse.build_commit()}
    pathlib.Path(path).write_text(json.dumps({**meta, "results": results}, indent=1))
