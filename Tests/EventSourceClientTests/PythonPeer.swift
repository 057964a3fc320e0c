import Foundation

/// Starts a Python peer server from `Peers/` with the project's virtual environment and stops it.
/// Fails with instructions when the environment is missing: it never skips silently.
final class PythonPeer: @unchecked Sendable {
    // @unchecked: `process` is set once in init and only read afterwards; Process itself is
    // thread-safe for terminate/waitUntilExit.
    let port: Int
    private let process: Process

    struct Missing: Error, CustomStringConvertible {
        let description: String
    }

    static var python: String {
        if let configured = ProcessInfo.processInfo.environment["REALTIME_PYTHON"] { return configured }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return root.appendingPathComponent(".venv/bin/python").path
    }

    init(script: String) throws {
        let python = Self.python
        guard FileManager.default.isExecutableFile(atPath: python) else {
            throw Missing(description: "the interop peers are not installed (\(python) is missing): run Scripts/test.sh, which creates .venv from Scripts/requirements.txt")
        }
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Peers/\(script)").path
        process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = ["-u", path]
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = Pipe()  // the peer exits when this closes, even if the test is killed
        try process.run()
        // The peer prints "PORT <n>" once it listens.
        var line = Data()
        let handle = output.fileHandleForReading
        while true {
            let byte = handle.readData(ofLength: 1)
            if byte.isEmpty { break }
            if byte.first == UInt8(ascii: "\n") { break }
            line.append(byte)
        }
        let text = String(decoding: line, as: UTF8.self)
        guard text.hasPrefix("PORT "), let port = Int(text.dropFirst(5)) else {
            process.terminate()
            let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            throw Missing(description: "the peer \(script) did not start: \(text) \(stderr) (run Scripts/test.sh to install the pinned peers)")
        }
        self.port = port
    }

    /// Asks the peer to stop, and kills it if it is still running a second later (uvicorn's
    /// graceful shutdown waits for open streams).
    func stop() {
        process.terminate()
        let deadline = Date().addingTimeInterval(1)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}
