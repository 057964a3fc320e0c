import ArgumentParser
import EventSourceClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOConcurrencyHelpers
import RealtimeCore

struct SSECommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sse", abstract: "Print the events of a Server-Sent Events stream, reconnecting as EventSource does.",
        discussion: """
            Examples:
              realtime sse https://example.com/events
              realtime sse https://example.com/events --json --last-event-id 41
              realtime sse http://127.0.0.1:8000/ --count 200000 --quiet --stats

            --stats prints one line when the command stops (--count reached, the stream closed for \
            good, or Ctrl-C): events, bytes, seconds, events per second.
            """)

    @Argument(help: "http:// or https:// URL") var url: String
    @OptionGroup var connection: ConnectionOptions
    @Option(name: .long, help: "Stop after this many events.") var count: Int?
    @Option(name: .long, help: "Send this Last-Event-ID on the first request.") var lastEventId: String?
    @Flag(name: .long, help: "Print comment lines too.") var comments = false
    @Flag(name: .long, help: "Print no events (with --stats: measure a stream).") var quiet = false
    @Flag(name: .long, help: "When stopping, print 'N events, B bytes, S s, R events/s' (with --json, a JSON object).") var stats = false
    @Option(name: .long, help: "Once connected, give up after this many consecutive failed reconnects (0: never retry; default 5).")
    var reconnectAttempts: Int?
    @Option(name: .long, help: "Try a first connection that fails this many more times, as curl's --retry (default: exit at once, unless --reconnect-attempts is given).")
    var retry: Int?

    func run() async throws {
        guard let target = URL(string: url) else { throw ValidationError("not a URL: \(url)") }
        var configuration = EventSourceConfiguration(
            headers: try connection.headers, lastEventId: lastEventId, maxReconnectAttempts: max(reconnectAttempts ?? 5, retry ?? 0),
            connectTimeout: connection.connectTimeout, tls: connection.tls)
        configuration.includeComments = comments
        let source = EventSource(url: target, configuration: configuration, runtime: connection.runtime)
        let (json, quiet, count) = (connection.json, quiet, count)
        // A first connection that fails ends the command, as curl does, unless retries were asked for.
        let firstRetries = retry ?? reconnectAttempts ?? 0
        let seen = SeenCounter()
        let started = ContinuousClock.now
        var failure: RealtimeError?
        do {
            failure = try await Interruption.returning {
                var iterator = source.updates.makeAsyncIterator()
                var opened = false
                var failedFirstAttempts = 0
                while let update = try await iterator.next() {
                    switch update {
                    case .open: opened = true
                    case .event(let event):
                        if !quiet { say(json ? event.jsonLine : "[\(event.type)] id=\(event.lastEventId) \(event.data)") }
                        let total = seen.increment()
                        if let count, total >= count { return nil }
                    case .comment(let text): if !quiet { say(": \(text)") }
                    case .failure(let error, let willRetry):
                        if !opened {
                            failedFirstAttempts += 1
                            if failedFirstAttempts > firstRetries { return error }
                        }
                        if willRetry { printError("realtime sse: \(error) (reconnecting)") } else { return error }
                    }
                }
                return nil
            }
        } catch {
            source.close()
            if stats { printStats(events: seen.value, bytes: source.bytesReceived, since: started) }
            throw error
        }
        source.close()
        if stats { printStats(events: seen.value, bytes: source.bytesReceived, since: started) }
        if let failure {
            printError("realtime sse: the stream failed for good: \(failure)")
            throw ExitCode.failure
        }
    }

    private func printStats(events: Int, bytes: Int, since start: ContinuousClock.Instant) {
        let elapsed = ContinuousClock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let rate = seconds > 0 ? Double(events) / seconds : 0
        // A rate from the elapsed time, with decimals where they matter (one event over 1.9 s is
        // 0.53 events/s, not 0).
        let rateText = rate >= 100 ? String(Int(rate)) : String(format: "%.2f", rate)
        if connection.json {
            say("{\"events\":\(events),\"bytes\":\(bytes),\"seconds\":\(String(format: "%.3f", seconds)),\"eventsPerSecond\":\(rateText)}")
        } else {
            say("\(events) events, \(bytes) bytes, \(String(format: "%.3f", seconds)) s, \(rateText) events/s")
        }
    }
}

/// Counts events across the interruptible work and the stats line.
final class SeenCounter: Sendable {
    private let box = NIOLockedValueBox(0)
    func increment() -> Int { box.withLockedValue { $0 += 1; return $0 } }
    var value: Int { box.withLockedValue { $0 } }
}

func printError(_ text: String) {
    StandardOutput.write(text + "\n", to: STDERR_FILENO)
}

extension ServerSentEvent {
    var jsonLine: String {
        "{\"type\":\(JSONText.quote(type)),\"id\":\(JSONText.quote(lastEventId)),\"data\":\(JSONText.quote(data))}"
    }
}

enum JSONText {
    static func quote(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case let control where control.value < 0x20:
                let hex = String(control.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
