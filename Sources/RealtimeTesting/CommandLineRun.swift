public import Foundation
import NIOConcurrencyHelpers

/// Runs an executable of this package (`realtime`, an example) that the same build made, for the
/// command-line tests.
public enum RealtimeCommandLine {
    public struct Missing: Error, CustomStringConvertible {
        public let description: String
    }

    /// The folder the running test bundle was built into: the package's executables are there too,
    /// whatever the build (debug, release, a sanitizer, another scratch path).
    public static var binDirectory: URL {
        let running = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        var directory = running.deletingLastPathComponent()
        // The test bundle runs from inside `<bin>/<name>.xctest/...` on some platforms.
        while directory.path.contains(".xctest") { directory = directory.deletingLastPathComponent() }
        return directory
    }

    /// The `realtime` command the same build made.
    public static var executable: String { executable(named: "realtime") }

    /// An executable of this package that the same build made.
    public static func executable(named name: String) -> String {
        binDirectory.appendingPathComponent(name).path
    }

    /// Runs `realtime <arguments>` to its end and returns its exit status, standard output and
    /// standard error. The pipes are read on Dispatch threads: blocking the concurrency pool would
    /// starve an in-process server the command talks to.
    public static func run(_ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
        try await run(executable: executable, arguments)
    }

    /// Runs `executable <arguments>` to its end (see ``run(_:)``).
    public static func run(executable: String, _ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
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
