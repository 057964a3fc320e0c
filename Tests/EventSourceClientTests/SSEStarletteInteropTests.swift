import EventSourceClient
import Foundation
import RealtimeCore
import RealtimeTesting
import Testing

/// Against an SSE server written by others: sse-starlette 3.7.0 on uvicorn (Scripts/requirements.txt).
@Suite(.serialized, .timeLimit(.minutes(1))) struct SSEStarletteInteropTests {
    @Test func reconnectsAndResumesFromLastEventIdAgainstSSEStarlette() async throws {
        // Started and stopped off the concurrency pool: waiting for uvicorn on a pool thread (2 on
        // this machine) stalled every other test's async work for seconds in a full run.
        let peer = try await PythonPeer.start(scriptPath: peerScript("sse_peer.py"))
        defer { Task { await peer.stop() } }
        let comments = NSLock()
        nonisolated(unsafe) var commentCount = 0
        let source = EventSource(
            url: URL(string: "http://127.0.0.1:\(peer.port)/numbers?total=9&per=3")!,
            configuration: fastConfiguration {
                $0.onComment = { _ in comments.withLock { commentCount += 1 } }
            })
        let events = try await collect(source, count: 9)
        source.close()
        #expect(events.map(\.data) == (1...9).map { "number \($0)" })
        #expect(events.map(\.type) == Array(repeating: "number", count: 9))
        #expect(events.map(\.lastEventId) == (1...9).map(String.init))
        #expect(source.reconnectionTime == .milliseconds(50))
        #expect(comments.withLock { commentCount } >= 3, "one hello comment per connection")
    }

    @Test func multiLineUnicodeData() async throws {
        // Started and stopped off the concurrency pool: waiting for uvicorn on a pool thread (2 on
        // this machine) stalled every other test's async work for seconds in a full run.
        let peer = try await PythonPeer.start(scriptPath: peerScript("sse_peer.py"))
        defer { Task { await peer.stop() } }
        let source = EventSource(url: URL(string: "http://127.0.0.1:\(peer.port)/unicode")!, configuration: fastConfiguration())
        let events = try await collect(source, count: 1)
        source.close()
        #expect(events == [ServerSentEvent(type: "text", data: "grüße\n豆腐 €\nlast line")])
    }
}

func peerScript(_ name: String) -> String {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Peers/\(name)").path
}
