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
        let deadline = ContinuousClock.now + .seconds(30)
        while server.connectionIds.isEmpty, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
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
}
