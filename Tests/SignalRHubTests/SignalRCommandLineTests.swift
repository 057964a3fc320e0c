import Foundation
import NIOConcurrencyHelpers
import RealtimeCore
import RealtimeTesting
import Testing

/// `realtime signalr` against SignalRTestServer: results and items on stdout (one JSON line each
/// with --json), failures on stderr with a non-zero exit.
@Suite(.serialized, .timeLimit(.minutes(2))) struct SignalRCommandLineTests {
    func run(_ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
        try await RealtimeCommandLine.run(arguments)
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

    @Test func onPrintsInvocationsUntilCount() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        async let listened = run(["signalr", server.url, "--on", "notify", "--on", "other", "--count", "3", "--json"])
        try await waitUntil("the command connected", limit: .seconds(30)) { !server.connectionIds.isEmpty }
        for index in 1...5 { await server.broadcast(index == 2 ? "other" : "notify", [.number(Double(index))]) }
        let result = try await listened
        #expect(result.status == 0, "\(result.stderr)")
        #expect(
            result.stdout == """
                {"kind":"invocation","method":"notify","value":[1]}
                {"kind":"invocation","method":"other","value":[2]}
                {"kind":"invocation","method":"notify","value":[3]}

                """, "exactly --count lines, in arrival order")
    }

    /// Sources/SignalRHub/SignalRHub.docc/SignalRGuide.md: with `--on`, a reader of stdout that stops reading stops the connection's
    /// reads; the command does not buffer. The server pushes 6,000 invocations of 32 KiB (192 MB)
    /// while nobody reads the command's stdout: the pushes stall (the client stopped reading, so
    /// the server's writes wait) and the command's memory stays near its handler queue (1,024
    /// invocations, 32 MB), far below what buffering everything would take.
    @Test func onWithAStalledStdoutStopsReadingInsteadOfBuffering() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        guard FileManager.default.isExecutableFile(atPath: RealtimeCommandLine.executable) else {
            Issue.record("\(RealtimeCommandLine.executable) is missing: `swift build` builds it (Scripts/test.sh does)")
            return
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: RealtimeCommandLine.executable)
        process.arguments = ["signalr", server.url, "--on", "notify"]
        let output = Pipe()  // never read until the end
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        try await waitUntil("the command connected", limit: .seconds(30)) { !server.connectionIds.isEmpty }

        let total = 6_000
        let payload = JSONValue.string(String(repeating: "x", count: 32 << 10))
        let sent = NIOLockedValueBox(0)
        let pusher = Task {
            for _ in 0..<total {
                if Task.isCancelled { return }
                await server.broadcast("notify", [payload])
                sent.withLockedValue { $0 += 1 }
            }
        }
        // Wait until the pushes stop making progress (or all are sent), bounded: "no progress" is
        // an absence, so the count is sampled once a second.
        let deadline = ContinuousClock.now + .seconds(60)
        var last = -1
        while ContinuousClock.now < deadline {
            try await Task.sleep(for: .seconds(1))  // sampling an absence (see above)
            let now = sent.withLockedValue { $0 }
            if now == total || now == last { break }
            last = now
        }
        let pushed = sent.withLockedValue { $0 }
        let residentMB = Self.residentMegabytes(process.processIdentifier)
        pusher.cancel()
        process.terminate()
        _ = await BlockingWork.run { output.fileHandleForReading.readDataToEndOfFile() }
        await BlockingWork.run { process.waitUntilExit() }
        #expect(pushed < total, "all \(total) invocations (192 MB) went out although nobody read the command's output")
        let rss = try #require(residentMB, "no VmRSS for the command's process")
        #expect(rss < 150, "the command holds \(rss) MB after \(pushed) invocations of 32 KiB were pushed")
    }

    /// VmRSS of a process, in MB (Linux /proc).
    static func residentMegabytes(_ pid: Int32) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        else { return nil }
        let kilobytes = line.split(separator: " ").compactMap { Int($0) }.first
        return kilobytes.map { $0 / 1024 }
    }
}
