import Foundation

// @unchecked Sendable: every stored property is a `let` set in init. `Process` is safe to
// terminate and wait on from any thread; the output `Pipe` is read by one caller at a time
// (`nextLine` then `waitForExit`, awaited in sequence by the test that owns the peer).

/// Runs a Python interop peer (a server or a client script) with the project's virtual environment.
/// Fails with instructions when the environment is missing: it never skips silently.
///
/// The interpreter is `$REALTIME_PYTHON` (set by `Scripts/test.sh`) or `<repo>/.venv/bin/python`.
public final class PythonPeer: @unchecked Sendable {

    /// The port a server peer printed (`PORT <n>`), or 0 for peers that print none.
    public let port: Int
    private let process: Process
    private let output: Pipe

    /// The peer's process id (benchmarks read its CPU time from /proc).
    public var processIdentifier: Int32 { process.processIdentifier }

    /// The virtual environment or a peer package is missing.
    public struct Missing: Error, CustomStringConvertible {
        /// What is missing and the command that installs it (`Scripts/test.sh`).
        public let description: String
    }

    /// The Python interpreter: `$REALTIME_PYTHON`, or the package's `.venv/bin/python`.
    public static var python: String {
        if let configured = ProcessInfo.processInfo.environment["REALTIME_PYTHON"] { return configured }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return root.appendingPathComponent(".venv/bin/python").path
    }

    /// The interpreter of the socket.io 2.x peer (python-socketio 4.6.1, python-engineio 3.14.2,
    /// which conflict with the 5.x peer): `$REALTIME_PYTHON_SIO2`, or the package's `.venv-sio2/bin/python`.
    public static var socketIO2Python: String {
        if let configured = ProcessInfo.processInfo.environment["REALTIME_PYTHON_SIO2"] { return configured }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return root.appendingPathComponent(".venv-sio2/bin/python").path
    }

    /// Starts `script` with `arguments`, on `python` (``python`` by default). With `waitForPort`,
    /// waits for the "PORT <n>" line a server peer prints once it listens. Blocks its thread: only
    /// ``start(scriptPath:arguments:waitForPort:python:)`` calls it, on a thread of its own.
    private init(scriptPath: String, arguments: [String] = [], waitForPort: Bool = true, python: String? = nil) throws {
        let python = python ?? Self.python
        guard FileManager.default.isExecutableFile(atPath: python) else {
            let environment = python == Self.socketIO2Python ? ".venv-sio2 from Scripts/requirements-sio2.txt" : ".venv from Scripts/requirements.txt"
            throw Missing(description: "the interop peers are not installed (\(python) is missing): run Scripts/test.sh, which creates \(environment)")
        }
        process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = ["-u", scriptPath] + arguments
        output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = Pipe()  // the peer exits when this closes, even if the test is killed
        try process.run()
        // Killed at exit if the test never stopped it (a stop from an unstructured task may come
        // too late).
        ChildProcessLeftovers.started(pid: process.processIdentifier)
        guard waitForPort else {
            port = 0
            return
        }
        let text = Self.readLine(output.fileHandleForReading)
        guard text.hasPrefix("PORT "), let port = Int(text.dropFirst(5)) else {
            process.terminate()
            ChildProcessLeftovers.ended(pid: process.processIdentifier)
            let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            throw Missing(description: "the peer \(scriptPath) did not start: \(text) \(stderr) (run Scripts/test.sh to install the pinned peers)")
        }
        self.port = port
    }

    /// Starts `script` with `arguments`, on `python` (``python`` by default). With `waitForPort`,
    /// returns once the peer printed the "PORT <n>" line a server peer prints when it listens
    /// (a python interpreter's start-up time), waiting on a thread of its own (see ``BlockingWork``),
    /// never on one that runs tasks.
    public static func start(scriptPath: String, arguments: [String] = [], waitForPort: Bool = true, python: String? = nil) async throws -> PythonPeer {
        try await BlockingWork.run { try PythonPeer(scriptPath: scriptPath, arguments: arguments, waitForPort: waitForPort, python: python) }
    }

    private static func readLine(_ handle: FileHandle) -> String {
        var line = Data()
        while true {
            let byte = handle.readData(ofLength: 1)
            if byte.isEmpty || byte.first == UInt8(ascii: "\n") { break }
            line.append(byte)
        }
        return String(decoding: line, as: UTF8.self)
    }

    /// Reads the next line the peer prints (on a thread of its own, see ``BlockingWork``).
    public func nextLine() async -> String {
        let handle = output.fileHandleForReading
        return await BlockingWork.run { Self.readLine(handle) }
    }

    /// Waits for the peer to exit on its own, up to `limit`, then kills it. Returns everything it
    /// printed after the port line and its exit status.
    public func waitForExit(limit: Duration) async -> (output: String, status: Int32) {
        let handle = output.fileHandleForReading
        let process = process
        DispatchQueue.global().asyncAfter(deadline: .now() + Double(limit.components.seconds)) {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        let collected = await BlockingWork.run {
            let data = handle.readDataToEndOfFile()
            process.waitUntilExit()
            ChildProcessLeftovers.ended(pid: process.processIdentifier)
            return data
        }
        return (String(decoding: collected, as: UTF8.self), process.terminationStatus)
    }

    /// Kills the peer with SIGKILL, as a crash or an out-of-memory kill ends a process: it closes
    /// nothing itself (the kernel closes its sockets). Returns once it has exited.
    public func killAbruptly() async {
        await BlockingWork.run {
            if self.process.isRunning { kill(self.process.processIdentifier, SIGKILL) }
            self.waitForEnd(limit: 10)
            ChildProcessLeftovers.ended(pid: self.process.processIdentifier)
        }
    }

    /// The repository's root (peers' scripts live under it).
    static var repositoryRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    /// Asks the peer to stop, and kills it if it is still running a second later. The waiting
    /// happens on a thread of its own (see ``BlockingWork``), never on one that runs tasks.
    public func stop() async {
        await BlockingWork.run { self.stopBlocking() }
    }

    private func stopBlocking() {
        process.terminate()
        let deadline = Date().addingTimeInterval(1)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        waitForEnd(limit: 10)
        ChildProcessLeftovers.ended(pid: process.processIdentifier)
    }

    /// Waits up to `limit` seconds for the process to end, polling: Foundation's `waitUntilExit`
    /// has been seen to wait forever for a peer killed with SIGKILL that had already ended (its
    /// exit never reached the `Process`). Ended: `isRunning` says so, or /proc has the process no
    /// more or only as a zombie.
    private func waitForEnd(limit: TimeInterval) {
        let pid = process.processIdentifier
        let deadline = Date().addingTimeInterval(limit)
        while process.isRunning, Date() < deadline {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")"), stat[stat.index(after: close)...].split(separator: " ").first != "Z"
            else { return }
            usleep(5_000)
        }
    }
}
