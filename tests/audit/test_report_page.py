"""The HTML report in a real headless Chromium (Debian's, driven by
selenium through Debian's chromedriver): the heatmap shows each state in its
colour, a cell leads to the window's drill-down, nothing is fetched from
outside. SAMSA_SCREENSHOT_DIR=dir keeps the screenshots."""
from __future__ import annotations

import os
import shutil
import time

import pytest

from audit.config import ServeConfig
from audit.service import AuditService
from audit.web import COLOURS

from test_service import scenario

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture
def browser(tmp_path):
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.fail("Debian's chromium and chromium-driver are needed "
                    "(scripts/ensure-system-packages.sh installs them)")
    from selenium import webdriver
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--disable-quic",
                "--window-size=1400,1000", f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER),
                              options=options)
    yield driver
    driver.quit()


def rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, 1)"


def test_heatmap_and_drill_down_in_chromium(browser, zookeeper, zk_chroot, tmp_path):
    from selenium.webdriver.common.by import By
    config = ServeConfig(zookeeper=zookeeper.connect_string(zk_chroot), http_port=0,
                         data_dir=str(tmp_path), grace_ms=60_000)
    service = AuditService(config)
    try:
        now = int(time.time() * 1000)
        events, begin, end = scenario(now)
        service.store.add_events(events, end)      # received as the windows ended
        port = service.serve_http()
        browser.get(f"http://127.0.0.1:{port}/?hours=6")
        assert browser.title == "Samsa audit"
        panels = [h.text for h in browser.find_elements(By.TAG_NAME, "h2")]
        assert panels == ["tier: producer", "tier: cluster"]
        cells = browser.find_elements(By.CSS_SELECTOR, "table.heat a")
        states = sorted(c.get_attribute("aria-label") for c in cells)
        # producer: 3 complete; cluster (worst of dc-a and analysis per window):
        # complete, lost, lost and duplicated
        assert states == ["complete"] * 4 + ["lost", "lost_and_duplicated"]
        lost = browser.find_element(By.CSS_SELECTOR, "table.heat a[aria-label=lost]")
        assert lost.value_of_css_property("background-color") == rgb(COLOURS["lost"])
        assert lost.size["width"] > 20 and lost.size["height"] > 15
        shots = os.environ.get("SAMSA_SCREENSHOT_DIR")
        browser.save_screenshot(str(tmp_path / "heatmap.png"))
        lost.click()
        assert "window" in browser.title
        rows = browser.find_elements(By.CSS_SELECTOR, "table tr")[1:]
        cells_text = [[td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in rows]
        analysis = next(r for r in cells_text if r[2] == "analysis")
        assert analysis[3] == "lost" and analysis[7] == "3"      # 3 missing, exact
        browser.save_screenshot(str(tmp_path / "window.png"))
        if shots:
            for name in ("heatmap.png", "window.png"):
                shutil.copy(tmp_path / name, os.path.join(shots, name))
        # self-contained: every request the page made went to the service
        import json
        urls = [json.loads(e["message"])["message"].get("params", {}).get("request", {})
                .get("url", "") for e in browser.get_log("performance")]
        urls = [u for u in urls if u.startswith("http")]
        assert urls and all(u.startswith(f"http://127.0.0.1:{port}/") for u in urls), urls
    finally:
        service.close()
