"""The portal in Chromium on `pai up`'s real platform: sign in, import, check, submit, follow."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from pai.embedded.platform import SERVICES
from tests.portal.conftest import ADMIN_PASSWORD, AXE, ROOT, USER, USER_PASSWORD, PortalPlatform
from tests.support.waiting import eventually

pytestmark = [pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]

ANCHOR_JOB = (
    ROOT.parent / "shared" / "anchors" / "openpai" / "jobs" / "pai" / "docs" / "manual" / "cluster-user"
)
REAL_OPENPAI_JOB = ANCHOR_JOB / "examples" / "hello-world-job.yaml"


DESKTOP = {"width": 1440, "height": 900}


async def signed_in(
    browser: Any, platform: PortalPlatform, user: str, password: str, viewport: dict[str, int] | None = None
) -> Any:
    context = await browser.new_context(viewport=viewport) if viewport else await browser.new_context()
    page = await context.new_page()
    await page.goto(platform.url + "/")
    await page.fill("#username", user)
    await page.fill("#password", password)
    await page.click("button[type=submit]")
    await page.wait_for_url("**/home.html")
    return page


async def count_navigations(page: Any) -> list[str]:
    navigations: list[str] = []
    page.on(
        "framenavigated", lambda frame: navigations.append(frame.url) if frame == page.main_frame else None
    )
    return navigations


async def test_import_a_real_openpai_job_submit_and_watch_it_succeed_without_reload(
    platform: PortalPlatform, browser: Any, artifacts: Path, tmp_path: Path
) -> None:
    if not REAL_OPENPAI_JOB.exists():
        pytest.skip(f"OpenPAI's example jobs are not beside the repository ({REAL_OPENPAI_JOB} is missing)")
    page = await signed_in(browser, platform, "admin", ADMIN_PASSWORD)
    await page.goto(platform.url + "/submit.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.set_input_files("#import-file", str(REAL_OPENPAI_JOB))
    await page.wait_for_function("() => document.querySelector('#f-name').value === 'hello-world-job'")
    # The form shows what the file says ...
    assert await page.input_value("#r-taskrole-resourcePerInstance_gpu") == "1"
    assert "git clone" in await page.input_value("#r-taskrole-commands")
    # ... and edits in the form reach the YAML: this machine has no GPU and no internet.
    await page.fill("#f-name", "portal-hello")
    await page.fill("#r-taskrole-resourcePerInstance_gpu", "0")
    await page.fill("#r-taskrole-resourcePerInstance_memoryMB", "256")
    await page.fill("#r-taskrole-commands", "echo hello from the portal\necho second line")
    await page.wait_for_function(
        "() => document.querySelector('#yaml').value.includes('hello from the portal')"
    )
    yaml_text = await page.input_value("#yaml")
    assert "name: portal-hello" in yaml_text
    assert "gpu: 0" in yaml_text
    assert "plugin: ssh" in yaml_text, "what the form does not show is kept"
    # The platform's local tasks have no ssh server: it refuses the plugin (`pai job exec` instead).
    await page.uncheck("#f-ssh")
    await page.wait_for_function("() => !document.querySelector('#yaml').value.includes('plugin: ssh')")
    await page.screenshot(path=str(artifacts / "submit.png"), full_page=True)

    await page.click("#submit")
    await page.wait_for_url("**/job-detail.html?username=admin&jobName=portal-hello")
    navigations = await count_navigations(page)
    # Through the platform's event stream when it runs one, else by the portal asking REST.
    await page.wait_for_selector(f"body[data-live={'gateway' if 'events' in SERVICES else 'poll'}]")
    await page.wait_for_selector("body[data-state=SUCCEEDED]", timeout=90_000)
    await page.wait_for_function(
        "() => document.querySelector('#log').textContent.includes('hello from the portal')", timeout=30_000
    )
    assert navigations == [], f"the page was reloaded: {navigations}"
    assert await page.text_content("#summary") is not None
    assert "SUCCEEDED" in (await page.text_content("#job-title") or "")
    await page.screenshot(path=str(artifacts / "job-detail.png"), full_page=True)
    # Clone opens the submit page with the job's config under a new name.
    await page.click("#clone")
    await page.wait_for_selector("body[data-ready=true]")
    await page.wait_for_function(
        "() => document.querySelector('#yaml').value.includes('portal-hello-clone-')"
        " && document.querySelector('#f-name').value.startsWith('portal-hello-clone-')"
    )
    assert "hello from the portal" in await page.input_value("#r-taskrole-commands")
    assert (await page.input_value("#f-name")).startswith("portal-hello-clone-")
    await page.context.close()


async def test_a_wrong_field_is_shown_at_the_field_and_line_before_submitting(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    page = await signed_in(browser, platform, USER, USER_PASSWORD)
    await page.goto(platform.url + "/submit.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.fill("#r-main-resourcePerInstance_cpu", "-3")
    await page.wait_for_selector(".field.invalid #r-main-resourcePerInstance_cpu")
    problem = await page.text_content(".field.invalid .problem")
    assert problem
    assert "cpu" in (await page.text_content("#problems") or "").lower()
    assert await page.locator("#gutter .bad-line").count() == 1
    bad_line = int((await page.text_content("#gutter .bad-line") or "0").strip())
    assert "cpu: -3" in (await page.input_value("#yaml")).splitlines()[bad_line - 1]
    await page.click("#submit")
    await page.wait_for_function(
        "() => document.querySelector('#submit-status').textContent.startsWith('Not submitted')"
    )
    assert page.url.endswith("/submit.html"), "nothing was submitted"
    listed = await platform.admin.get("/api/v2/jobs", params={"username": USER})
    assert listed.json() == []
    await page.screenshot(path=str(artifacts / "submit-invalid.png"), full_page=True)
    await page.context.close()


PAGES = (
    "/home.html",
    "/submit.html",
    "/job-list.html",
    "/virtual-clusters.html",
    "/usage.html",
    "/user-profile.html",
    "/marketplace.html",
)
ADMIN_PAGES = (
    "/user-view.html",
    "/group-view.html",
    "/cluster-view/services.html",
    "/cluster-view/hardware.html",
    "/alerts.html",
    "/marketplace-review.html",
)


async def portal_client(platform: PortalPlatform, user: str, password: str) -> httpx.AsyncClient:
    client = httpx.AsyncClient(base_url=platform.url, timeout=30)
    form = await client.get("/index.html")
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', form.text)
    assert csrf, form.text
    signed = await client.post(
        "/portal/login", data={"username": user, "password": password, "csrf": csrf.group(1), "next": ""}
    )
    assert signed.status_code == 302, signed.text
    assert signed.headers["location"] == "/home.html"
    return client


async def submit_as(
    platform: PortalPlatform,
    user: str,
    password: str,
    name: str,
    gpu: int = 0,
    command: str | None = None,
    cpu: int = 1,
    instances: int = 1,
    job_retries: int | None = None,
) -> None:
    login = await platform.admin.post(
        "/api/v2/authn/basic/login", json={"username": user, "password": password}
    )
    token = login.json()["token"]
    text = (
        (ROOT / "examples" / "hello.yaml")
        .read_text()
        .replace("hello-pai", name)
        .replace("gpu: 0", f"gpu: {gpu}")
        .replace("cpu: 1", f"cpu: {cpu}")
        .replace("instances: 1", f"instances: {instances}")
    )
    if command is not None:
        text = text.split("    commands:")[0] + f"    commands:\n      - {json.dumps(command)}\n"
    if job_retries is not None:
        text = text.replace("type: job\n", f"type: job\njobRetryCount: {job_retries}\n", 1)
    answer = await platform.admin.post(
        "/api/v2/jobs",
        content=text,
        headers={"Content-Type": "text/yaml", "Authorization": f"Bearer {token}"},
    )
    assert answer.status_code == 202, answer.text


async def test_every_page_answers_to_whom_it_may_and_refuses_the_rest(platform: PortalPlatform) -> None:
    await submit_as(platform, "admin", ADMIN_PASSWORD, "admins-own")
    admin = await portal_client(platform, "admin", ADMIN_PASSWORD)
    user = await portal_client(platform, USER, USER_PASSWORD)
    anonymous = httpx.AsyncClient(base_url=platform.url, timeout=30)
    try:
        for path in (*PAGES, *ADMIN_PAGES, "/job-detail.html?username=admin&jobName=admins-own"):
            answer = await admin.get(path)
            assert answer.status_code == 200, (path, answer.status_code)
            assert "text/html" in answer.headers["content-type"]
        for path in (*PAGES, f"/job-detail.html?username={USER}&jobName=anything"):
            assert (await user.get(path)).status_code == 200, path
        for path in (*ADMIN_PAGES, "/job-detail.html?username=admin&jobName=admins-own"):
            assert (await user.get(path)).status_code == 403, path
        for path in ("/", "/index.html"):
            assert (await user.get(path)).headers.get("location") == "/home.html"
            assert (await anonymous.get(path)).status_code == 200
        refused = await anonymous.get("/job-list.html")
        assert refused.status_code == 302
        assert refused.headers["location"].startswith("/index.html?next=")
        # A normal user's menu shows no admin page.
        menu = (await user.get("/home.html")).text
        assert "/user-view.html" not in menu
        assert "/user-view.html" in (await admin.get("/home.html")).text
    finally:
        for client in (admin, user, anonymous):
            await client.aclose()


async def test_the_token_stays_in_an_httponly_cookie_and_every_write_needs_the_csrf_token(
    platform: PortalPlatform,
) -> None:
    client = httpx.AsyncClient(base_url=platform.url, timeout=30)
    form = await client.get("/index.html")
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', form.text)
    assert csrf
    signed = await client.post(
        "/portal/login", data={"username": USER, "password": USER_PASSWORD, "csrf": csrf.group(1)}
    )
    cookie = signed.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=Lax" in cookie
    try:
        page = await client.get("/submit.html")
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy
        assert "unsafe-inline" not in policy
        assert "<script>" not in page.text, "no inline script"
        session = (await client.get("/portal/session")).json()
        assert session["user"] == USER
        assert "token" not in session, "page scripts never see the API token"
        me = await client.get("/api/v2/users/me")
        assert me.status_code == 200, "reads go through with the session's token"
        assert me.json()["username"] == USER
        body = {"data": {"email": "alice@example.com"}, "patch": True}
        refused = await client.put("/api/v2/users/me", json=body)
        assert refused.status_code == 403
        assert "CSRF" in refused.json()["message"]
        elsewhere = await client.put(
            "/api/v2/users/me",
            json=body,
            headers={"X-CSRF-Token": session["csrf"], "Origin": "https://attacker.example"},
        )
        assert elsewhere.status_code == 403
        accepted = await client.put("/api/v2/users/me", json=body, headers={"X-CSRF-Token": session["csrf"]})
        assert accepted.status_code == 201, accepted.text
        forged = httpx.AsyncClient(base_url=platform.url, cookies={"pai_session": "forged"})
        async with forged:
            assert (await forged.get("/home.html")).status_code == 302
            assert (await forged.get("/portal/session")).status_code == 401
        bad_login = await client.post(
            "/portal/login", data={"username": USER, "password": "wrong", "csrf": "x"}
        )
        assert bad_login.status_code == 403
    finally:
        await client.aclose()


async def test_a_waiting_job_shows_its_reason_and_the_list_updates_live(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    page = await signed_in(browser, platform, USER, USER_PASSWORD)
    await page.goto(platform.url + "/job-list.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.wait_for_selector("body[data-live]")
    navigations = await count_navigations(page)

    # A job that holds every CPU the node offers, then one more asking for them all: it fits the
    # node, so it is taken, and waits (a job larger than the nodes together is refused at once).
    async def nodes() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = (await platform.admin.get("/api/v2/kubernetes/nodes")).json()["items"]
        return items

    cores = max(int(node["status"]["capacity"]["cpu"]) for node in await eventually(nodes, bool))
    await submit_as(platform, USER, USER_PASSWORD, "holds-all", cpu=cores, command="sleep 300")
    await submit_as(platform, USER, USER_PASSWORD, "too-big", cpu=cores)
    row = page.locator('tr[data-job="alice~too-big"]')
    await row.wait_for(timeout=15_000)
    assert navigations == [], "the new job appeared without a reload"
    await page.screenshot(path=str(artifacts / "job-list.png"), full_page=True)
    await row.locator("a[href*=job-detail]").click()
    await page.wait_for_selector("#pending:not(.hidden)", timeout=15_000)
    reason = await page.text_content("#pending") or ""
    assert reason.startswith("Waiting:")
    assert f"{cores} CPU" in reason, reason
    await page.wait_for_function(
        "() => /Queue\\s*\\d+ of \\d+ in VC default/.test(document.querySelector('#summary').textContent)"
    )
    await page.screenshot(path=str(artifacts / "job-detail-waiting.png"), full_page=True)
    page.on("dialog", lambda dialog: dialog.accept())
    await page.click("#stop")
    await page.wait_for_selector("body[data-state=STOPPED]", timeout=30_000)
    await platform.admin.put("/api/v2/jobs/alice~holds-all/executionType", json={"value": "STOP"})
    await page.context.close()


async def _points(client: httpx.AsyncClient, path: str, key: str, metric: str) -> int:
    answer = await client.get(path)
    assert answer.status_code == 200, answer.text
    return max((len(r["points"]) for r in answer.json()[key] if r["metric"] == metric), default=0)


# Busy for a few seconds (a CPU line worth seeing), then idle until stopped.
BUSY = "i=0; while [ $i -lt 8000000 ]; do i=$((i+1)); done; sleep 300"


MANY_TASKS = """async () => {
  const src = [...document.scripts].map((s) => s.src).find((s) => s.includes("/static/"));
  const charts = await import(new URL("common.js", src));
  const tasks = Array.from({ length: 20 }, (_, i) => (
    { role: "w", index: i, metric: "cpu", points: [[100, i], [160, 2 * i]] }));
  const figure = charts.historyChart(
    { tasks, now: 200 }, "cpu", { title: "t", sinceSeconds: 0, key: (r) => r.index });
  return [...figure.querySelectorAll("polyline")].map(
    (p) => `${p.getAttribute("data-series")}:${p.getAttribute("points").split(" ").length}`);
}"""


async def test_use_over_time_is_drawn_on_home_hardware_and_job_pages(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    await submit_as(platform, USER, USER_PASSWORD, "busy", command=BUSY)
    await submit_as(platform, "admin", ADMIN_PASSWORD, "admins-measured")
    alice = await portal_client(platform, USER, USER_PASSWORD)
    try:
        # The monitor's history through REST, under the bus's per-service permissions.
        await eventually(
            lambda: _points(platform.admin, "/api/v2/cluster/metrics", "nodes", "cpu"), lambda n: n >= 3
        )
        await eventually(
            lambda: _points(alice, "/api/v2/jobs/alice~busy/metrics", "tasks", "cpu"), lambda n: n >= 3
        )
        assert (await alice.get("/api/v2/cluster/metrics")).status_code == 403
        assert (await alice.get("/api/v2/jobs/admin~admins-measured/metrics")).status_code == 403
        # The owner's job page draws each task's CPU over time.
        page = await signed_in(browser, platform, USER, USER_PASSWORD)
        await page.goto(platform.url + "/job-detail.html?username=alice&jobName=busy")
        await page.wait_for_selector("body[data-history=true]")
        line = page.locator('#task-cpu polyline[data-series="main[0]"]')
        assert await line.count() == 1
        assert len((await line.get_attribute("points") or "").split()) >= 3
        assert "main[0]" in (await page.text_content("#task-cpu svg") or "")
        await page.locator("#task-cpu").screenshot(path=str(artifacts / "job-detail-task-use.png"))
        # A job of many tasks is drawn as their mean, lowest and highest, not as a line each.
        drawn = await page.evaluate(MANY_TASKS)
        assert drawn == ["mean of 20:2", "lowest:2", "highest:2"]
        await page.context.close()
    finally:
        await alice.aclose()
    admin = await signed_in(browser, platform, "admin", ADMIN_PASSWORD)
    await admin.wait_for_selector("body[data-history=true]")
    assert await admin.locator('#use polyline[data-series="CPU"]').count() == 1
    await admin.screenshot(path=str(artifacts / "home-admin.png"), full_page=True)
    await admin.goto(platform.url + "/cluster-view/hardware.html")
    await admin.wait_for_selector("body[data-history=true]")
    history = (await platform.admin.get("/api/v2/cluster/metrics")).json()
    nodes = {r["node"] for r in history["nodes"] if r["metric"] == "cpu"}
    assert nodes
    for node in nodes:
        assert await admin.locator(f'#cpu-history polyline[data-series="{node}"]').count() == 1
    assert await admin.locator("#memory-history polyline").count() >= 1
    await admin.screenshot(path=str(artifacts / "hardware-history.png"), full_page=True)
    await platform.admin.put("/api/v2/jobs/alice~busy/executionType", json={"value": "STOP"})
    await admin.context.close()


async def test_alerts_show_firing_recent_and_rules_and_a_group_is_edited(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    page = await signed_in(browser, platform, "admin", ADMIN_PASSWORD)
    await page.goto(platform.url + "/alerts.html")
    await page.wait_for_selector("body[data-ready=true]")
    # The built-in rules, from the alerter that evaluates them.
    assert await page.locator('#rules tr[data-rule="NodeNotReady"]').count() == 1
    assert "built in" in (await page.text_content("#rules-source") or "")
    recent = await platform.admin.get("/api/v2/alerts/recent")
    assert recent.status_code == 200, recent.text
    shown = await page.text_content("#recent") or ""
    assert shown.startswith("No alert resolved") if recent.json() == [] else "Resolved" in shown
    await page.screenshot(path=str(artifacts / "alerts.png"), full_page=True)

    await page.goto(platform.url + "/group-view.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.fill("#g-name", "editors")
    await page.fill("#g-desc", "first words")
    await page.click("#add-group button[type=submit]")
    row = page.locator('tr[data-group="editors"]')
    await row.wait_for()
    await row.locator("button[data-edit]").click()
    assert await page.input_value("#e-desc") == "first words"
    await page.fill("#e-desc", "second words")
    await page.fill("#e-vcs", "default")
    await page.check("#e-admin")
    await page.click("#edit-group button[type=submit]")
    await page.wait_for_function(
        "() => document.querySelector('tr[data-group=editors]')?.textContent.includes('second words')"
    )
    assert await page.locator("#edit-panel.hidden").count() == 1
    stored = (await platform.admin.get("/api/v2/groups/editors")).json()
    assert stored["description"] == "second words"
    assert stored["extension"]["acls"] == {"admin": True, "virtualClusters": ["default"]}
    await page.screenshot(path=str(artifacts / "group-edited.png"), full_page=True)
    await page.context.close()


async def test_no_serious_accessibility_violation_on_any_page(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    if not AXE.exists():
        pytest.skip(f"axe-core is not installed ({AXE}); `make setup` runs npm ci in services/portal")
    axe = AXE.read_text()
    page = await signed_in(browser, platform, "admin", ADMIN_PASSWORD, viewport=DESKTOP)
    found: dict[str, list[str]] = {}
    for path in (*PAGES, *ADMIN_PAGES, "/job-detail.html?username=admin&jobName=portal-hello"):
        await page.goto(platform.url + path)
        await page.wait_for_selector("body[data-ready=true]", timeout=15_000)
        await page.evaluate(axe)  # through the debugger protocol: the page's CSP does not apply
        result = await page.evaluate("async () => await axe.run(document)")
        bad = [
            f"{v['id']} ({v['impact']}): {v['nodes'][0]['target']}"
            for v in result["violations"]
            if v["impact"] in ("serious", "critical")
        ]
        if bad:
            found[path] = bad
        name = path.strip("/").split("?")[0].replace("/", "-").replace(".html", "")
        await page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)
    anonymous = await browser.new_context()
    signin = await anonymous.new_page()
    await signin.goto(platform.url + "/")
    await signin.evaluate(axe)
    result = await signin.evaluate("async () => await axe.run(document)")
    bad = [v["id"] for v in result["violations"] if v["impact"] in ("serious", "critical")]
    if bad:
        found["/"] = bad
    await signin.screenshot(path=str(artifacts / "index.png"), full_page=True)
    await anonymous.close()
    await page.context.close()
    assert found == {}


PHONE = {"width": 390, "height": 844}


async def test_on_a_phone_the_menu_opens_from_a_button_and_no_page_is_wider_than_the_screen(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    await submit_as(platform, "admin", ADMIN_PASSWORD, "on-a-phone")
    context = await browser.new_context(viewport=PHONE)
    page = await context.new_page()
    await page.goto(platform.url + "/")
    await page.fill("#username", "admin")
    await page.fill("#password", ADMIN_PASSWORD)
    await page.click("button[type=submit]")
    await page.wait_for_url("**/home.html")
    await page.wait_for_selector("body[data-ready=true]")
    # The menu is folded: its links are not shown until the button opens it.
    assert not await page.locator("#main-menu a", has_text="Submit job").is_visible()
    await page.click("#menu-toggle")
    assert await page.get_attribute("#menu-toggle", "aria-expanded") == "true"
    link = page.locator("#main-menu a", has_text="Submit job")
    box = await link.bounding_box()
    assert box is not None
    assert box["y"] >= 0, box
    assert box["x"] + box["width"] <= PHONE["width"], box
    await page.screenshot(path=str(artifacts / "phone-menu.png"))
    await link.click()
    await page.wait_for_url("**/submit.html")
    await page.wait_for_selector("body[data-ready=true]")
    axe = AXE.read_text() if AXE.exists() else None
    wide: dict[str, int] = {}
    found: dict[str, list[str]] = {}
    for path in (*PAGES, *ADMIN_PAGES, "/job-detail.html?username=admin&jobName=on-a-phone"):
        await page.goto(platform.url + path)
        await page.wait_for_selector("body[data-ready=true]", timeout=15_000)
        width = await page.evaluate("() => document.documentElement.scrollWidth")
        if width > PHONE["width"]:
            wide[path] = width
        if axe is not None:
            await page.evaluate(axe)
            result = await page.evaluate("async () => await axe.run(document)")
            bad = [v["id"] for v in result["violations"] if v["impact"] in ("serious", "critical")]
            if bad:
                found[path] = bad
        name = path.strip("/").split("?")[0].replace("/", "-").replace(".html", "")
        await page.screenshot(path=str(artifacts / f"phone-{name}.png"), full_page=True)
    await context.close()
    assert wide == {}, "pages wider than a phone's screen"
    assert found == {}, "serious accessibility violations on a phone"


PLUGINS_JOB = ANCHOR_JOB.parents[2] / "examples" / "mnist_500_tasks" / "yaml" / "CPU_500Task_MNIST.yaml"
RUNTIME_PLUGINS = "com.microsoft.pai.runtimeplugin"


async def test_the_ssh_box_and_storages_write_openpais_plugin_key_and_an_import_fills_them(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    import yaml

    page = await signed_in(browser, platform, USER, USER_PASSWORD)
    await page.goto(platform.url + "/submit.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.check("#f-ssh")
    await page.fill("#f-storage", "home, data")
    await page.wait_for_function("() => document.querySelector('#yaml').value.includes('teamwise_storage')")
    written = yaml.safe_load(await page.input_value("#yaml"))
    assert "com" not in written["extras"], "no nested com: microsoft: pai: objects"
    assert written["extras"][RUNTIME_PLUGINS] == [
        {"plugin": "ssh", "parameters": {"jobssh": True}},
        {"plugin": "teamwise_storage", "parameters": {"storageConfigNames": ["home", "data"]}},
    ]
    await page.uncheck("#f-ssh")
    await page.wait_for_function("() => !document.querySelector('#yaml').value.includes('plugin: ssh')")
    plugins = yaml.safe_load(await page.input_value("#yaml"))["extras"][RUNTIME_PLUGINS]
    assert [p["plugin"] for p in plugins] == ["teamwise_storage"]

    if not PLUGINS_JOB.exists():
        pytest.skip(f"OpenPAI's example jobs are not beside the repository ({PLUGINS_JOB} is missing)")
    await page.set_input_files("#import-file", str(PLUGINS_JOB))
    await page.wait_for_function("() => document.querySelector('#f-name').value === 'CPU_500Task_MNIST'")
    assert await page.is_checked("#f-ssh")
    assert await page.input_value("#f-storage") == "confignfs"
    await page.click("#env-vars summary")
    assert "PAI_TASK_INDEX" in (await page.text_content("#env-vars") or "")
    await page.screenshot(path=str(artifacts / "submit-plugins.png"), full_page=True)
    await page.context.close()


async def test_check_reports_a_storage_and_a_vc_the_user_may_not_use_in_submits_words(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    created = await platform.admin.post(
        "/api/v2/users",
        json={"username": "nobody-vc", "password": "nobody-password-1", "admin": False, "virtualCluster": []},
    )
    assert created.status_code == 201, created.text
    page = await signed_in(browser, platform, "nobody-vc", "nobody-password-1")
    await page.goto(platform.url + "/submit.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.fill("#f-storage", "confignfs")
    await page.wait_for_function("() => document.querySelector('#yaml').value.includes('confignfs')")
    await page.click("#check")
    await page.wait_for_function(
        "() => document.querySelector('#submit-status').textContent.startsWith('The platform would refuse')"
    )
    problems = await page.text_content("#problems") or ""
    assert "User nobody-vc is not allowed to do operation in default" in problems
    assert "you may not use storage confignfs" in problems
    assert await page.locator(".field.invalid #f-vc").count() == 1
    assert await page.locator(".field.invalid #f-storage").count() == 1
    await page.screenshot(path=str(artifacts / "submit-check-refused.png"), full_page=True)
    # Submit refuses it in the same words, and nothing was stored by the check.
    await page.click("#submit")
    await page.wait_for_function(
        "() => document.querySelector('#submit-status').textContent.startsWith('Not submitted')"
    )
    assert "User nobody-vc is not allowed to do operation in default" in (
        await page.text_content("#submit-status") or ""
    )
    listed = await platform.admin.get("/api/v2/jobs", params={"username": "nobody-vc"})
    assert listed.json() == []
    await page.context.close()

    # A user who may submit it hears that the platform would accept it.
    page = await signed_in(browser, platform, USER, USER_PASSWORD)
    await page.goto(platform.url + "/submit.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.click("#check")
    await page.wait_for_function(
        "() => document.querySelector('#submit-status').textContent === 'The platform would accept this job.'"
    )
    assert "the platform would accept" in (await page.text_content("#problems") or "")
    await page.context.close()


async def test_the_attempt_selector_lists_each_attempt_and_opens_an_earlier_ones_tasks(
    platform: PortalPlatform, browser: Any
) -> None:
    login = await platform.admin.post(
        "/api/v2/authn/basic/login", json={"username": USER, "password": USER_PASSWORD}
    )
    text = (ROOT / "examples" / "hello.yaml").read_text().replace("hello-pai", "retried")
    text = text.replace("type: job\n", "type: job\njobRetryCount: 2\n")
    text = text.split("    commands:")[0] + "    commands:\n      - exit 3\n"
    answer = await platform.admin.post(
        "/api/v2/jobs",
        content=text,
        headers={"Content-Type": "text/yaml", "Authorization": f"Bearer {login.json()['token']}"},
    )
    assert answer.status_code == 202, answer.text

    async def attempts() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = (
            await platform.admin.get("/api/v2/jobs/alice~retried/job-attempts")
        ).json()
        return found

    await eventually(attempts, lambda found: len(found) == 3 and found[0]["state"] == "FAILED", within=120)
    page = await signed_in(browser, platform, USER, USER_PASSWORD)
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url) if "/attempts/" in request.url else None)
    await page.goto(platform.url + "/job-detail.html?username=alice&jobName=retried")
    await page.wait_for_selector("body[data-state=FAILED]")
    await page.wait_for_function("() => document.querySelectorAll('#attempt option').length === 4")
    options = [(o or "").strip() for o in await page.locator("#attempt option").all_text_contents()]
    assert options == ["latest", "#0 FAILED", "#1 FAILED", "#2 FAILED (latest)"]
    async with page.expect_response("**/jobs/alice~retried/attempts/0") as response:
        await page.select_option("#attempt", "0")
    assert (await response.value).status == 200
    await page.wait_for_function(
        "() => [...document.querySelectorAll('#summary dt')].some("
        "(dt) => dt.textContent === 'Attempt' && dt.nextElementSibling.textContent === '0')"
    )
    assert await page.locator('#roles tr[data-task="main-0"]').count() == 1
    assert not any("NaN" in url or "undefined" in url for url in asked), asked
    await page.context.close()


async def test_an_open_job_list_follows_12_submissions_in_30_s_with_at_most_30_list_reads(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    page = await signed_in(browser, platform, USER, USER_PASSWORD)
    reads: list[int] = []
    page.on(
        "response",
        lambda response: (
            reads.append(response.status)
            if response.request.method == "GET" and response.url.split("?")[0].endswith("/api/v2/jobs")
            else None
        ),
    )
    await page.goto(platform.url + "/job-list.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.wait_for_selector("body[data-live]")
    started = asyncio.get_running_loop().time()
    for n in range(12):
        await submit_as(platform, USER, USER_PASSWORD, f"burst-{n}")
        await asyncio.sleep(max(0.0, started + 2.5 * (n + 1) - asyncio.get_running_loop().time()))
    # Every job shows, in its final state, without a reload.
    for n in range(12):
        await page.wait_for_selector(f'tr[data-job="alice~burst-{n}"] [data-state=SUCCEEDED]', timeout=30_000)
    elapsed = asyncio.get_running_loop().time() - started
    assert len(reads) <= 30, f"{len(reads)} list reads in {elapsed:.0f} s"
    assert 429 not in reads
    await page.screenshot(path=str(artifacts / "job-list-burst.png"), full_page=True)
    await page.context.close()


COMMENTED_JOB = """# A job kept by hand: its comments and forms stay when the form changes one field.
protocolVersion: 2
name: commented
version: 1.0
type: job
jobRetryCount: 0 # no retries
prerequisites:
  - type: dockerimage
    name: image
    uri: python:3.11-slim
taskRoles:
  main:
    instances: 1
    dockerImage: image
    resourcePerInstance:
      cpu: 1
      memoryMB: 256
      gpu: 0
    commands:
      - |
        echo first
        echo second
"""


async def test_changing_one_field_keeps_the_comments_block_scalars_and_numbers_of_the_yaml(
    platform: PortalPlatform, browser: Any, tmp_path: Path
) -> None:
    page = await signed_in(browser, platform, USER, USER_PASSWORD)
    await page.goto(platform.url + "/submit.html")
    await page.wait_for_selector("body[data-ready=true]")
    path = tmp_path / "commented.yaml"
    path.write_text(COMMENTED_JOB)
    await page.set_input_files("#import-file", str(path))
    await page.wait_for_function("() => document.querySelector('#f-name').value === 'commented'")
    await page.fill("#f-retry", "2")
    await page.check("#f-ssh")
    await page.wait_for_function("() => document.querySelector('#yaml').value.includes('plugin: ssh')")
    text = await page.input_value("#yaml")
    assert text.startswith("# A job kept by hand")
    assert "jobRetryCount: 2 # no retries" in text
    assert "version: 1.0\n" in text
    assert "      - |\n        echo first\n        echo second\n" in text
    # Only the changed field and the plugin differ from what the user wrote.
    assert text.replace("jobRetryCount: 2", "jobRetryCount: 0").startswith(COMMENTED_JOB)
    await page.context.close()


async def test_the_profile_changes_the_password_only_with_the_old_one(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    created = await platform.admin.post(
        "/api/v2/users",
        json={
            "username": "changer",
            "password": "first-password",
            "admin": False,
            "virtualCluster": ["default"],
        },
    )
    assert created.status_code == 201, created.text
    page = await signed_in(browser, platform, "changer", "first-password")
    await page.goto(platform.url + "/user-profile.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.fill("#old-password", "not-the-password")
    await page.fill("#new-password", "second-password")
    await page.fill("#new-password-again", "second-password")
    await page.click("#password-form button[type=submit]")
    await page.wait_for_selector("#old-password-error")  # said at the field
    assert "not right" in (await page.text_content("#old-password-error") or "")
    await page.fill("#old-password", "first-password")
    await page.fill("#new-password", "second-password")
    await page.fill("#new-password-again", "second-password")
    await page.click("#password-form button[type=submit]")
    await page.wait_for_function(
        "() => document.querySelector('#password-status').textContent.startsWith('Your password is changed')"
    )
    await page.screenshot(path=str(artifacts / "profile-password.png"), full_page=True)
    old = await platform.admin.post(
        "/api/v2/authn/basic/login", json={"username": "changer", "password": "first-password"}
    )
    new = await platform.admin.post(
        "/api/v2/authn/basic/login", json={"username": "changer", "password": "second-password"}
    )
    assert (old.status_code, new.status_code) == (400, 200)
    # This sign-in goes on.
    await page.reload()
    await page.wait_for_selector("body[data-ready=true]")
    assert page.url.endswith("/user-profile.html")
    await page.context.close()


async def test_the_vc_page_shows_the_nodes_cpu_and_memory_where_no_gpu_is(
    platform: PortalPlatform, browser: Any
) -> None:
    vcs = (await platform.admin.get("/api/v2/virtual-clusters")).json()
    default = vcs["default"]
    if default["cluster"]["gpus"]:
        pytest.skip("this platform has GPUs: its VCs guarantee them")
    cores = sum(node["cpu"] for node in default["nodes"])
    memory = sum(node["memoryMb"] for node in default["nodes"])
    assert cores > 0
    page = await signed_in(browser, platform, USER, USER_PASSWORD)
    await page.goto(platform.url + "/virtual-clusters.html")
    await page.wait_for_selector("body[data-ready=true]")
    row = page.locator('tr[data-vc="default"]')
    cpu = await row.locator("td[data-cpu]").get_attribute("data-cpu") or ""
    assert cpu.split("/")[1] == str(cores)
    assert f"/ {cores} (its nodes)" in (await row.locator("td[data-cpu]").text_content() or "")
    assert (await row.locator("td[data-memory]").get_attribute("data-memory") or "").split("/")[1] == str(
        memory
    )
    await page.context.close()


async def test_a_user_sees_links_only_to_the_jobs_they_may_open(
    platform: PortalPlatform, browser: Any
) -> None:
    await submit_as(platform, "admin", ADMIN_PASSWORD, "admins-listed")
    page = await signed_in(browser, platform, USER, USER_PASSWORD)
    await page.goto(platform.url + "/job-list.html")
    await page.wait_for_selector('tr[data-job="admin~admins-listed"]')
    assert await page.locator('tr[data-job="admin~admins-listed"] a').count() == 0
    assert await page.locator('tr[data-job^="admin~"] a[href*="job-detail"]').count() == 0
    await page.context.close()


async def test_admin_pages_list_every_service_add_a_user_with_the_default_vc_and_search_users(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    page = await signed_in(browser, platform, "admin", ADMIN_PASSWORD)
    await page.goto(platform.url + "/cluster-view/services.html")
    await page.wait_for_selector("body[data-ready=true]")
    shown = {
        name: await page.get_attribute(f'[data-service="{name}"]', "data-up")
        for name in (
            "rest",
            "scheduler",
            "orchestrator",
            "monitor",
            "alerter",
            "events",
            "marketplace",
            "portal",
        )
    }
    expected = dict.fromkeys(shown, "true")
    if "events" not in SERVICES:
        expected["events"] = "absent"
    assert shown == expected
    await page.screenshot(path=str(artifacts / "services.png"), full_page=True)

    await page.goto(platform.url + "/user-view.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.fill("#u-name", "blank-vc")
    await page.fill("#u-password", "blank-vc-password")
    await page.click("#add-user button[type=submit]")
    await page.wait_for_function(
        "() => document.querySelector('#add-status').textContent.startsWith('User blank-vc added')"
    )
    stored = (await platform.admin.get("/api/v2/users/blank-vc")).json()
    assert stored["virtualCluster"] == ["default"], "a blank VC field means what its placeholder says"
    await page.fill("#user-search", "blank")
    visible = page.locator("#users tr[data-user]:not(.hidden)")
    assert [await row.get_attribute("data-user") for row in await visible.all()] == ["blank-vc"]

    # A change made to every selected user at once.
    for name in ("batch-a", "batch-b"):
        made = await platform.admin.post(
            "/api/v2/users",
            json={"username": name, "password": f"{name}-password", "admin": False, "virtualCluster": []},
        )
        assert made.status_code == 201, made.text
    await page.fill("#user-search", "")
    await page.reload()
    await page.wait_for_selector("body[data-ready=true]")
    for name in ("batch-a", "batch-b"):
        await page.check(f'#users tr[data-user="{name}"] input.pick')
    assert await page.text_content("#batch-count") == "2 selected"
    await page.fill("#batch-vc-list", "default")
    await page.click("#batch-vcs")
    await page.wait_for_function(
        "() => document.querySelector('#batch-status').textContent.startsWith('Virtual')"
    )
    await page.click("#batch-admin")
    await page.wait_for_function(
        "() => document.querySelector('#batch-status').textContent.startsWith('Made')"
    )
    for name in ("batch-a", "batch-b"):
        stored = (await platform.admin.get(f"/api/v2/users/{name}")).json()
        assert (stored["virtualCluster"], stored["admin"]) == (["default"], True), stored
    await page.context.close()


async def test_the_job_list_has_clone_and_stop_on_each_own_row(
    platform: PortalPlatform, browser: Any
) -> None:
    await submit_as(platform, USER, USER_PASSWORD, "row-actions", command="sleep 300")
    page = await signed_in(browser, platform, USER, USER_PASSWORD)
    await page.goto(platform.url + "/job-list.html")
    row = page.locator('tr[data-job="alice~row-actions"]')
    await row.wait_for()
    assert "clone=alice%7Erow-actions" in (
        await row.locator("a", has_text="Clone").get_attribute("href") or ""
    )
    page.on("dialog", lambda dialog: dialog.accept())
    await row.locator("button[data-stop]").click()
    await page.wait_for_selector('tr[data-job="alice~row-actions"] [data-state=STOPPED]', timeout=30_000)
    assert await row.locator("button[data-stop]").count() == 0
    await page.context.close()


async def test_a_retried_tasks_tries_are_listed_from_its_row(platform: PortalPlatform, browser: Any) -> None:
    login = await platform.admin.post(
        "/api/v2/authn/basic/login", json={"username": USER, "password": USER_PASSWORD}
    )
    text = (ROOT / "examples" / "hello.yaml").read_text().replace("hello-pai", "task-retried")
    text = text.replace("    instances: 1\n", "    instances: 1\n    taskRetryCount: 2\n")
    # Tasks retry one by one where the job's tasks are not placed as one gang.
    text = (
        text.split("    commands:")[0] + "    commands:\n      - exit 3\nextras:\n  gangAllocation: false\n"
    )
    answer = await platform.admin.post(
        "/api/v2/jobs",
        content=text,
        headers={"Content-Type": "text/yaml", "Authorization": f"Bearer {login.json()['token']}"},
    )
    assert answer.status_code == 202, answer.text
    page = await signed_in(browser, platform, USER, USER_PASSWORD)
    await page.goto(platform.url + "/job-detail.html?username=alice&jobName=task-retried")
    await page.wait_for_selector("body[data-state=FAILED]", timeout=60_000)
    await page.click('button[data-tries="main/0"]')
    await page.wait_for_selector("#tries:not(.hidden) tr[data-try]")
    tries = await page.eval_on_selector_all(
        "#tries tr[data-try]", "(rows) => rows.map((r) => [...r.cells].map((c) => c.textContent))"
    )
    assert [row[0] for row in tries] == ["#0", "#1", "#2"]
    assert [row[1] for row in tries] == ["FAILED"] * 3
    assert [row[2] for row in tries] == ["3"] * 3
    await page.context.close()


async def test_a_nodes_page_shows_its_size_and_the_tasks_it_runs(
    platform: PortalPlatform, browser: Any
) -> None:
    await submit_as(platform, USER, USER_PASSWORD, "on-a-node", command="sleep 300")

    async def pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = (await platform.admin.get("/api/v2/kubernetes/pods")).json()["items"]
        return [pod for pod in items if pod["metadata"]["labels"]["jobName"] == "on-a-node"]

    pod = (await eventually(pods, lambda found: bool(found) and found[0]["status"]["phase"] == "Running"))[0]
    node = pod["spec"]["nodeName"]
    page = await signed_in(browser, platform, "admin", ADMIN_PASSWORD)
    await page.goto(platform.url + "/cluster-view/hardware.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.click(f'#nodes tr[data-node="{node}"] a')
    await page.wait_for_selector("#node-detail:not(.hidden) a[href*='jobName=on-a-node']")
    assert await page.text_content("#node-title") == f"Node {node}"
    assert "cores" in (await page.text_content("#node-body") or "")
    await platform.admin.put("/api/v2/jobs/alice~on-a-node/executionType", json={"value": "STOP"})
    await page.context.close()


async def test_an_admin_changes_the_virtual_clusters_and_hears_the_schedulers_checks(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    user = await signed_in(browser, platform, USER, USER_PASSWORD)
    await user.goto(platform.url + "/virtual-clusters.html")
    await user.wait_for_selector("body[data-ready=true]")
    assert await user.locator("#vc-admin.hidden").count() == 1, "the editor is for admins"
    await user.context.close()
    page = await signed_in(browser, platform, "admin", ADMIN_PASSWORD)
    await page.goto(platform.url + "/virtual-clusters.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.wait_for_function("() => document.querySelector('#vc-config').value.includes('default:')")
    await page.fill(
        "#vc-config",
        "virtualClusters:\n  research:\n    virtualCells:\n"
        "      - cellType: NO-SUCH-CELL\n        cellNumber: 1\n",
    )
    await page.click("#vc-config-form button[type=submit]")
    await page.wait_for_selector("#vc-config-answer .bad")
    said = await page.text_content("#vc-config-answer") or ""
    assert said.startswith("Not applied: virtualClusters.research.virtualCells[0].cellType"), said
    assert "NO-SUCH-CELL" in said
    assert "research" not in (await platform.admin.get("/api/v2/virtual-clusters")).json()
    await page.screenshot(path=str(artifacts / "vc-admin-refused.png"), full_page=True)
    await page.context.close()


async def test_the_vc_editor_starts_from_the_config_in_force(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    made = await platform.admin.put("/api/v2/virtual-clusters/editor-team", json={"cpu": 1, "memoryMB": 256})
    assert made.status_code == 200, made.text
    try:
        page = await signed_in(browser, platform, "admin", ADMIN_PASSWORD)
        await page.goto(platform.url + "/virtual-clusters.html")
        await page.wait_for_selector("body[data-ready=true]")
        await page.wait_for_function(
            "() => document.querySelector('#vc-config').value.includes('editor-team:')"
        )
        text = await page.input_value("#vc-config")
        assert text.startswith("# The scheduler config in force; its cells are derived from the nodes.\n"), (
            text
        )
        assert "physicalCluster:" in text
        assert "cellTypes:" in text, "with its cell types"
        assert "CELL-TYPE" not in text, "no skeleton to fill in"
        assert "  editor-team:\n    virtualCells: []\n    cpu: 1\n    memoryMB: 256\n" in text
        await page.click("#vc-config-form button[type=submit]")  # sent back as it is: nothing changes
        await page.wait_for_selector("#vc-config-answer .ok")
        vcs = (await platform.admin.get("/api/v2/virtual-clusters")).json()
        assert vcs["editor-team"]["quota"] == {"cpu": 1, "memoryMb": 256, "shared": False}
        await page.screenshot(path=str(artifacts / "vc-editor-in-force.png"), full_page=True)
        await page.context.close()
    finally:
        removed = await platform.admin.delete("/api/v2/virtual-clusters/editor-team")
        assert removed.status_code == 200, removed.text


async def test_an_older_checks_late_answer_never_overwrites_a_newer_one(
    platform: PortalPlatform, browser: Any
) -> None:
    page = await signed_in(browser, platform, USER, USER_PASSWORD)
    await page.goto(platform.url + "/submit.html")
    await page.wait_for_selector("body[data-ready=true]")
    # The first check after the wrong value is held back until the right value's check is answered.
    released: list[Any] = []
    answered = 0

    async def hold_first(route: Any) -> None:
        nonlocal answered
        if not released:
            released.append(route)
            return
        await route.continue_()
        answered += 1

    await page.route("**/portal/validate", hold_first)
    await page.fill("#r-main-resourcePerInstance_cpu", "-3")
    await eventually(lambda: _async(len(released)), lambda n: n == 1, within=10)
    await page.fill("#r-main-resourcePerInstance_cpu", "2")
    await eventually(lambda: _async(answered), lambda n: n >= 1, within=10)
    await page.wait_for_function("() => !document.querySelector('.field.invalid')")
    # The stale answer (cpu -3 is wrong) arrives last; once it is in, and the page's tasks after
    # it have run, the page still shows the newer answer.
    async with page.expect_response("**/portal/validate"):
        await released[0].continue_()
    await page.evaluate("() => new Promise((done) => setTimeout(() => setTimeout(done, 0), 0))")
    assert await page.locator(".field.invalid").count() == 0
    assert "cpu" not in (await page.text_content("#problems") or "").lower()
    await page.context.close()


async def _async(value: int) -> int:
    return value
