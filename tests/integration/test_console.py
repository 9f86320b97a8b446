"""The web console in Debian's headless Chromium (through its ChromeDriver): a stream's page shows its
scaling history as key ranges over epochs, its segments' head, tail and bytes kept, an open transaction
and a subscribed reader group's lag, with no error in the browser's console; the screenshot is kept with
the test's files."""

from __future__ import annotations

import asyncio
import json
import shutil
import struct
import urllib.request
import uuid

import grpc
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from tests.support.processes import free_port, listening, wait_until_ready
from tests.support.sdk import sdk
from tests.support.standalone import StandaloneProcess

pytestmark = pytest.mark.process

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def post(base: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


@pytest.fixture
def browser(tmp_path):
    if not shutil.which(CHROMIUM) or not shutil.which(CHROMEDRIVER):
        pytest.fail("Chromium is not installed (./dev.sh test installs chromium and chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1400,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_a_streams_page(tmp_path, browser):
    rest_port = free_port()
    standalone = StandaloneProcess(tmp_path / "data", extra_args=["--rest-port", str(rest_port)]).start()
    base = f"http://127.0.0.1:{rest_port}"
    try:
        # start() waits for the gRPC port; the REST server starts after it (a full run once posted in between)
        wait_until_ready(standalone.process, listening(rest_port), "the REST server", timeout=30)
        post(base, "/v1/scopes", {"scopeName": "console"})
        post(base, "/v1/scopes/console/streams",
             {"streamName": "s", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 2}})
        post(base, "/v1/scopes/console/streams/s/scale", {"sealedSegments": [1], "newRanges": [[0.5, 0.75],
                                                                                             [0.75, 1.0]]})

        async def write_and_open_a_transaction() -> str:
            async with sdk.connect(standalone.controller_uri) as client:
                async with client.create_writer("console", "s") as writer:
                    await asyncio.gather(*[await writer.write(b"e" * 1000, f"key-{n}") for n in range(50)])
                transaction = await client.create_transactional_writer("console", "s").begin()
                await transaction.write(b"pending", "key")
                await transaction.flush()
                return str(transaction.id)

        transaction_id = asyncio.run(write_and_open_a_transaction())
        with grpc.insecure_channel(standalone.controller_uri[len("tcp://"):]) as channel:
            pb_grpc.ControllerServiceStub(channel).createReaderGroup(pb.ReaderGroupConfiguration(
                scope="console", readerGroupName="audit", retentionType=2, readerGroupId=str(uuid.uuid4()),
                startingStreamCuts=[pb.StreamCut(streamInfo=pb.StreamInfo(scope="console", stream="s"))]),
                timeout=30)

        browser.get(f"{base}/console/?stream=console/s")
        wait = WebDriverWait(browser, 30)
        wait.until(expected_conditions.presence_of_element_located((By.ID, "stream-title")))
        assert browser.find_element(By.ID, "stream-title").text == "console/s"
        assert "4 containers on 1 segment store(s), 1 controller(s)" in \
            browser.find_element(By.ID, "cluster-summary").text
        boxes = browser.find_elements(By.CSS_SELECTOR, "#scaling-history rect.segment")
        assert len(boxes) == 2 + 3  # epoch 0: two segments; epoch 1: segment 0 and its two successors of 1
        page = browser.find_element(By.ID, "detail").text
        assert transaction_id in page and "OPEN" in page
        assert "audit" in page and "console/s:" in page and "KiB" in page  # the group's lag, the segment sizes
        segments = browser.find_element(By.ID, "segments")
        assert [cell.text for cell in segments.find_elements(By.TAG_NAME, "th")] == \
            ["segment", "epoch", "key range", "start", "tail", "kept", "sealed"]
        rows = [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
                for row in segments.find_elements(By.TAG_NAME, "tr")[1:]]
        assert len(rows) == 3 and all(row[3] == "0 B" for row in rows), rows  # nothing truncated
        assert all(row[4] == row[5] and row[4] != "-" for row in rows), rows  # so all that was written is kept
        assert sum(row[4].endswith("KiB") for row in rows) >= 1, rows
        errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
        assert not errors, errors
        screenshot = tmp_path / "console.png"
        assert browser.save_screenshot(str(screenshot))
        data = screenshot.read_bytes()
        width, height = struct.unpack(">II", data[16:24])
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and width >= 1000 and height >= 700
    finally:
        standalone.kill()
