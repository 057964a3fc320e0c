import Foundation
import NIOConcurrencyHelpers

/// Runs this package's `realtime` executable (the debug build `swift build` makes, which
/// Scripts/test.sh runs before the tests), for the command-line tests.
public enum RealtimeCommandLine {
    public struct Missing: Error, CustomStringConvertible {
        public let description: String
    }

    /// `<package>/.build/debug/realtime`.
    public static var executable: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent(".build/debug/realtime").path
    }

    /// Runs `realtime <arguments>` to its end and returns its exit status, standard output and
    /// standard error. The pipes are read on Dispatch threads: blocking the concurrency pool would
    /// starve an in-process server the command talks to.
    public static func run(_ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw Missing(description: "\(executable) is missing: `swift build` builds it (Scripts/test.sh does)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        // Both pipes are read at once (a child that fills one while we wait on the other would
        // stall), each on a thread of its own, never on a thread that runs tasks (see BlockingWork):
        // the command usually talks to a server in this process.
        async let errorOutput = BlockingWork.run { errors.fileHandleForReading.readDataToEndOfFile() }
        let out = await BlockingWork.run { output.fileHandleForReading.readDataToEndOfFile() }
        let err = await errorOutput
        await BlockingWork.run { process.waitUntilExit() }
        return (process.terminationStatus, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
    }
}
