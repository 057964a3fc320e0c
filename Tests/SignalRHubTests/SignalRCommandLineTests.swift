import Foundation
import NIOConcurrencyHelpers
import RealtimeTesting
import Testing

/// `realtime signalr` against SignalRTestServer: results and items on stdout (one JSON line each
/// with --json), failures on stderr with a non-zero exit.
@Suite(.serialized, .timeLimit(.minutes(2))) struct SignalRCommandLineTests {
    static var executable: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent(".build/debug/realtime").path
    }

    struct Failure: Error, CustomStringConvertible { let description: String }

    func run(_ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
        guard FileManager.default.isExecutableFile(atPath: Self.executable) else {
            throw Failure(description: "\(Self.executable) is missing: `swift build` builds it (Scripts/test.sh does)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executable)
        process.arguments = arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        // Read on Dispatch threads: blocking the concurrency pool would starve the in-process server.
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

    @Test func invokeAndStreamPrintJSONLines() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let invoked = try await run(["signalr", server.url, "--invoke", "add", "[40, 2]", "--json"])
        #expect(invoked.status == 0, "\(invoked.stderr)")
        #expect(invoked.stdout == "{\"kind\":\"result\",\"method\":\"add\",\"value\":42}\n")
        let streamed = try await run(["signalr", server.url, "--stream", "countTo", "[3]", "--protocol", "messagepack", "--transport", "longpolling"])
        #expect(streamed.status == 0, "\(streamed.stderr)")
        #expect(streamed.stdout == "item countTo: 1\nitem countTo: 2\nitem countTo: 3\n")
        #expect(streamed.stderr.contains("connected over [LongPolling] with messagepack"))
    }

    @Test func failuresExitNonZeroWithTheReason() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let failed = try await run(["signalr", server.url, "--invoke", "fail", "[\"no such luck\"]"])
        #expect(failed.status == 1)
        #expect(failed.stderr.contains("no such luck"), "\(failed.stderr)")
        let refused = try await run(["signalr", server.url + "/missing"])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("HTTP 404"), "\(refused.stderr)")
        let badArguments = try await run(["signalr", server.url, "--invoke", "echo", "not json"])
        #expect(badArguments.status != 0)
    }
}
