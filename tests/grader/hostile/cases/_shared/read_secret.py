"""A secret of the checkout read every way a worker might: by path, through a directory descriptor,
with a shell, through other processes' views of the file system (/proc/*/root, /proc/*/cwd)."""


def _secret(relative):
    import glob
    import os
    import subprocess

    from grader.course import paths

    root = str(paths.REPO_ROOT)
    folder, name = os.path.split(os.path.join(root, relative))
    attempts = [
        lambda: open(os.path.join(folder, name)).read(),
        lambda: os.read(
            os.open(name, os.O_RDONLY, dir_fd=os.open(folder, os.O_RDONLY | os.O_DIRECTORY)),
            1 << 20,
        ).decode(),
        lambda: (
            subprocess.run(
                ["cat", os.path.join(folder, name)],
                capture_output=True,
                text=True,
                check=True,
                timeout=5,
            ).stdout
        ),
        lambda: (
            subprocess.run(
                ["/bin/sh", "-c", f"cat {folder}/{name}"],
                capture_output=True,
                text=True,
                check=True,
                timeout=5,
            ).stdout
        ),
    ]
    for view in glob.glob("/proc/*/root") + glob.glob("/proc/*/cwd"):
        attempts.append(lambda view=view: open(view + os.path.join(folder, name)).read())
        attempts.append(lambda view=view: open(os.path.join(view, relative)).read())
    for attempt in attempts:
        try:
            text = attempt()
        except Exception:
            continue
        if text and text.strip():
            return text
    return None
