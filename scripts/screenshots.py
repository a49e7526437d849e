"""Screenshots of the cdcflow page for the docs, from the running demo (scripts/demo.sh first).

    python scripts/screenshots.py    # writes docs/screenshots/*.png
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.browser import Browser  # noqa: E402


def main() -> None:
    base = f"http://127.0.0.1:{os.environ.get('CDCFLOW_AIRFLOW_PORT', '18080')}"
    password = json.loads(Path(os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]).read_text())["admin"]
    req = urllib.request.Request(f"{base}/auth/token", json.dumps({"username": "admin", "password": password}).encode(),
                                 headers={"Content-Type": "application/json"})
    token = json.load(urllib.request.urlopen(req, timeout=30))["access_token"]
    out = ROOT / "docs" / "screenshots"
    browser = Browser()
    try:
        browser.set_cookie(base + "/", "_token", token)
        shots = (("/cdcflow/", "pipelines.png", 0, None), ("/cdcflow/pipelines/demo_orders", "pipeline.png", 0, None),
                 ("/cdcflow/pipelines/demo_orders", "pipeline-charts.png", 0, "#charts"),
                 ("/dags/demo_orders/plugin/cdcflow-pipeline", "airflow-dag-tab.png", 8, None),
                 ("/assets", "airflow-assets.png", 8, None))  # Airflow's Assets view: the sink tables, the topics
        for path, name, wait, selector in shots:
            browser.open(base + path)
            time.sleep(wait)
            print(browser.screenshot(out / name, selector))
    finally:
        browser.close()


if __name__ == "__main__":
    main()
