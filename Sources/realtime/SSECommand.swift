import ArgumentParser
import EventSourceClient
import Foundation
import NIOCore
import NIOHTTP1
import RealtimeCore

struct SSECommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sse", abstract: "Print the events of a Server-Sent Events stream, reconnecting as EventSource does.")

    @Argument(help: "http:// or https:// URL") var url: String
    @Flag(name: .long, help: "One JSON object per event.") var json = false
    @Option(name: .long, help: "Stop after this many events.") var count: Int?
    @Option(name: .long, help: "Send this Last-Event-ID on the first request.") var lastEventId: String?
    @Option(name: .shortAndLong, help: "A request header 'Name: value' (repeatable).") var header: [String] = []
    @Flag(name: .long, help: "Print comment lines too.") var comments = false
    @Flag(name: .long, help: "Skip certificate verification (dangerous).") var insecure = false
    @Option(name: .long, help: "Give up after this many consecutive failed reconnects (0: never retry).")
    var reconnectAttempts: Int = 5

    func run() async throws {
        guard let target = URL(string: url) else { throw ValidationError("not a URL: \(url)") }
        var configuration = EventSourceConfiguration(lastEventId: lastEventId, maxReconnectAttempts: reconnectAttempts)
        for line in header {
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2 else { throw ValidationError("headers look like 'Name: value'") }
            configuration.headers.add(name: String(parts[0]), value: String(parts[1].drop(while: { $0 == " " })))
        }
        configuration.includeComments = comments
        if insecure { configuration.tls = .dangerouslyDisableCertificateVerification() }
        let source = EventSource(url: target, configuration: configuration)
        var seen = 0
        var failure: RealtimeError?
        loop: for try await update in source.updates {
            switch update {
            case .open: break
            case .event(let event):
                print(json ? event.jsonLine : "[\(event.type)] id=\(event.lastEventId) \(event.data)")
                seen += 1
                if let count, seen >= count { break loop }
            case .comment(let text): print(": \(text)")
            case .failure(let error, let willRetry):
                if willRetry {
                    printError("realtime sse: \(error) (reconnecting)")
                } else {
                    failure = error
                }
            }
        }
        source.close()
        if let failure {
            printError("realtime sse: the stream failed for good: \(failure)")
            throw ExitCode.failure
        }
    }
}

func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
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
