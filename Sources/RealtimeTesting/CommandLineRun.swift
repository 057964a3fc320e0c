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
        let (out, err) = await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                let group = DispatchGroup()
                let err = NIOLockedValueBox(Data())
                group.enter()
                DispatchQueue.global().async {
                    let data = errors.fileHandleForReading.readDataToEndOfFile()
                    err.withLockedValue { $0 = data }
                    group.leave()
                }
                let out = output.fileHandleForReading.readDataToEndOfFile()
                group.wait()
                process.waitUntilExit()
                continuation.resume(returning: (out, err.withLockedValue { $0 }))
            }
        }
        return (process.terminationStatus, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
    }
}
